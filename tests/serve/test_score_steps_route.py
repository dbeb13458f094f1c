"""POST /score_steps: a process reward per step, shaped like the body, equal to `rm.load(...).score_steps` (1e-6)
and so to plain transformers' token classifier (1e-5, checked here for one problem too); /info names the route
and the separator; every bad body is a one-line 4xx that never reaches the model; the steps are scored on the
model thread, in one forward with /score's texts when they are queued together; a model error is a 500."""

import dataclasses
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from scoring.prm_exports import ONE, PROBLEM, SEPARATOR, flat, plain_step_probabilities, prm_export
from serving import client, scorer_for, text_reference

import rm
from rm.model.reward import PooledLogits

TEXT = "\n\nHuman: What is 2 plus 3?\n\nAssistant: It is 5."
DEADLINE = 60.0


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory):
    return prm_export(tokenizer, tmp_path_factory.mktemp("serve-steps") / "prm")


@pytest.fixture(scope="module")
def scorer(folder):
    return scorer_for(str(folder))


@pytest.fixture(scope="module")
def api(folder):
    return rm.load(folder, device="cpu")


def close(got, want, tol: float = 1e-6) -> None:
    assert [x is None for x in flat(got)] == [x is None for x in flat(want)]
    assert [x for x in flat(got) if x is not None] == pytest.approx([x for x in flat(want) if x is not None], abs=tol)


def until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_problem_and_items_are_answered_in_their_shapes(scorer, api, folder, tokenizer):
    with client(scorer) as c:
        one = c.post("/score_steps", json=PROBLEM)
        items = c.post("/score_steps", json={"items": [ONE, PROBLEM, {"prompt": "p", "solutions": []}]})
        info = c.get("/info").json()
    assert one.status_code == 200 and set(one.json()) == {"step_scores"}
    close(one.json()["step_scores"], api.score_steps(PROBLEM))
    close(one.json()["step_scores"], plain_step_probabilities(folder, tokenizer, PROBLEM), 1e-5)
    assert [len(s) for s in one.json()["step_scores"]] == [2, 3]
    assert items.status_code == 200
    alone, problem, empty = items.json()["step_scores"]
    close([alone, problem], api.score_steps([ONE, PROBLEM]))
    assert len(alone) == 2 and empty == []
    assert "/score_steps" in info["routes"] and info["step_separator"] == SEPARATOR


def test_steps_past_max_length_are_null_or_refused_with_on_too_long_error(folder):
    short = scorer_for(str(folder), max_length=48)
    long = {"prompt": "What is 2 * 5?", "completions": ["2 * 5 = 10"] + ["and so on and so forth"] * 6}
    with client(short) as c:
        cut = c.post("/score_steps", json={"items": [PROBLEM, long]})
    assert cut.status_code == 200
    close(cut.json()["step_scores"], rm.load(folder, device="cpu", max_length=48).score_steps([PROBLEM, long]))
    assert cut.json()["step_scores"][1][0] is not None and cut.json()["step_scores"][1][-1] is None
    with client(short, on_too_long="error") as c:
        refused = c.post("/score_steps", json={"items": [{"prompt": "p", "completions": ["a"]}, long]})
        assert c.app.state.batcher.rounds == []
    assert refused.status_code == 422
    assert refused.json()["error"].startswith("items[1].completions does not fit max_length=48 tokens")


BAD = [
    (b'{"prompt": "p", ', 400, "malformed JSON"),
    (b'["a list"]', 400, "must be a JSON object"),
    ({"prompt": "p", "solutions": [["a"]], "steps": 1}, 400, "the body has unknown field(s) ['steps']"),
    ({"items": [PROBLEM], "prompt": "p"}, 400, "the body has unknown field(s) ['prompt']"),
    ({"items": [{"prompt": "p", "solution": [["a"]]}]}, 400, "items[0] has unknown field(s) ['solution']"),
    ({"prompt": "p", "solutions": [["a"]], "completions": ["a"]}, 400, "the body: give either 'solutions'"),
    ({"items": [PROBLEM, {"prompt": "p"}]}, 400, "items[1]: give either 'solutions'"),
    ({"items": "p"}, 400, "'items' must be an array"),
    ({"items": [PROBLEM, 3]}, 400, "items[1] must be a object"),
    ({"prompt": 3, "solutions": [["a"]]}, 400, "the body: field 'prompt' must be a string"),
    ({"prompt": "p", "solutions": [["a", 3]]}, 400, "the body: field 'solutions[0][1]' must be a string (a step)"),
    ({"prompt": "p", "solutions": ["a"]}, 400, "the body: field 'solutions[0]' must be a list of steps"),
    (
        {"items": [PROBLEM, {"prompt": "p", "solutions": [["a", " "]]}]},
        422,
        "items[1]: field 'solutions[0][1]' is an empty step",
    ),
    ({"prompt": "  ", "completions": ["a"]}, 422, "the body: field 'prompt' is empty"),
    ({"prompt": "p", "solutions": [["a"], []]}, 422, "the body: field 'solutions[1]' is empty"),
]


@pytest.mark.parametrize(("body", "status", "message"), BAD, ids=[b[2][:40] for b in BAD])
def test_each_bad_body_is_a_4xx_with_a_one_line_error_and_never_queued(scorer, body, status, message):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    with client(scorer) as c:
        got = c.post("/score_steps", content=content, headers={"content-type": "application/json"})
        assert c.app.state.batcher.rounds == []
    assert got.status_code == status, got.text
    error = got.json()["error"]
    assert message in error and "\n" not in error and set(got.json()) == {"error"}


def test_the_limits_of_the_other_routes_hold(scorer):
    """--max-texts counts solutions and problems; --max-body-bytes is checked before the body is read."""
    with client(scorer, max_texts=4) as c:
        solutions = c.post("/score_steps", json={"items": [PROBLEM, PROBLEM, ONE]})
        problems = c.post("/score_steps", json={"items": [{"prompt": "p", "solutions": []}] * 5})
        fits = c.post("/score_steps", json={"items": [PROBLEM, PROBLEM]})
    assert solutions.status_code == 413
    assert solutions.json()["error"] == "5 solutions in one request, over this server's --max-texts 4"
    assert problems.status_code == 413 and "5 problems in one request" in problems.json()["error"]
    assert fits.status_code == 200
    with client(scorer, max_body_bytes=100) as c:
        big = c.post("/score_steps", json={"items": [PROBLEM, PROBLEM]})
    assert big.status_code == 413 and "over this server's --max-body-bytes 100" in big.json()["error"]


def test_a_model_that_pools_the_sequence_is_refused(scorer):
    pooled = dataclasses.replace(scorer, model=PooledLogits(scorer.model.hf))
    with client(pooled) as c:
        got = c.post("/score_steps", json=PROBLEM)
    assert got.status_code == 422 and "pools the sequence itself" in got.json()["error"]


def test_steps_share_the_model_thread_and_a_forward_with_the_other_routes(scorer, api):
    """While the model thread holds a /score batch, a /score_steps request and another /score request queue; the
    next forward scores both, on the model thread, each with its own numbers (a batch in one part: --batch-threads
    1, where the CPU's default 2 would score each group in a thread of its own)."""
    gate, busy = threading.Event(), threading.Event()
    forwards: list[tuple[int, int, str]] = []  # (stepwise groups, other groups, thread) per forward

    def watched(groups):
        forwards.append(
            (
                sum(bool(g.step_ends) for g in groups),
                sum(not g.step_ends for g in groups),
                threading.current_thread().name,
            )
        )
        if not gate.is_set():
            busy.set()
            assert gate.wait(DEADLINE)
        return scorer.forward(groups)

    with client(scorer, max_wait_ms=0, batch_threads=1) as c, ThreadPoolExecutor(3) as pool:
        batcher = c.app.state.batcher
        batcher.forward = watched
        first = pool.submit(c.post, "/score", json={"texts": [TEXT]})
        assert busy.wait(DEADLINE)
        steps = pool.submit(c.post, "/score_steps", json=PROBLEM)
        until(lambda: batcher.queue.qsize() == 1, "the steps request in the model's queue")
        texts = pool.submit(c.post, "/score", json={"texts": [TEXT + " Yes."]})
        until(lambda: batcher.queue.qsize() == 2, "the second text in the model's queue")
        gate.set()
        answers = [f.result() for f in (first, steps, texts)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert forwards == [(0, 1, "rm-serve-model"), (1, 1, "rm-serve-model")]
    close(answers[1].json()["step_scores"], api.score_steps(PROBLEM))
    assert answers[2].json()["rewards"] == pytest.approx([text_reference(scorer, TEXT + " Yes.")[0]], abs=1e-5)


def test_a_model_error_is_a_500_with_a_logged_request_id_and_the_next_request_works(scorer, api, caplog):
    calls = {"n": 0}

    def flaky(groups):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA out of memory (simulated)")
        return scorer.forward(groups)

    with client(scorer) as c, caplog.at_level(logging.ERROR, logger="rm.serve"):
        c.app.state.batcher.forward = flaky
        failed = c.post("/score_steps", json=PROBLEM)
        after = c.post("/score_steps", json=PROBLEM)
    assert failed.status_code == 500 and failed.json()["request_id"] in failed.json()["error"]
    assert any(failed.json()["request_id"] in r.getMessage() for r in caplog.records)
    assert after.status_code == 200
    close(after.json()["step_scores"], api.score_steps(PROBLEM))
