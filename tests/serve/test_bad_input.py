"""Each bad request gets a 4xx with a one-line JSON error and never reaches a batch; the good requests coalesced
with it are answered as if it had not been sent; a text over max_length is cut from the left and flagged, or
refused with --on-too-long error; a model error is a 500 with a logged request id, and the next request works."""

import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
from serving import client, scorer_for, text_reference

from rm.evaluation.record_texts import GROUP_KEY, ScoreText

GOOD = "\n\nHuman: What is 2 plus 3?\n\nAssistant: It is 5."
LONG = "".join(f"\n\nHuman: Question number {i} here?\n\nAssistant: Answer {i}." for i in range(8))


@pytest.fixture(scope="module")
def scorer(exported_tiny):
    return scorer_for(str(exported_tiny))


@pytest.fixture(scope="module")
def short(exported_tiny):
    """The model served with max_length 24, so that ordinary texts are too long."""
    return scorer_for(str(exported_tiny), max_length=24)


BAD = [
    ("/score", b'{"texts": ["a", ', 400, "malformed JSON"),
    ("/score", b"\xff\xfe not utf-8", 400, "not UTF-8"),
    ("/score", b'["a list"]', 400, "must be a JSON object"),
    ("/score", {"texts": "one string"}, 400, "'texts' must be an array of strings"),
    ("/score", {"texts": ["ok", 3]}, 400, "texts[1] must be a string"),
    ("/score", {"text": ["typo"]}, 400, "unknown field(s) ['text']"),
    ("/score", {"texts": ["a"], "messages": []}, 400, "not both or neither"),
    ("/score", {"messages": [[{"role": "robot", "content": "x"}]]}, 400, "messages[0]"),
    ("/score", {"messages": [[{"role": "user", "content": "hi"}]]}, 422, "must end with an assistant message"),
    ("/score", {"texts": ["fine", "   "]}, 422, "texts[1] is empty"),
    ("/score", {"texts": ["\n\nHuman: hi\n\nAssistant:"]}, 422, "empty response"),
    ("/score_groups", {"groups": [{"prompt": 3, "responses": ["a"]}]}, 400, "groups[0].prompt must be"),
    ("/score_groups", {"groups": [{"prompt": "p", "responses": [{"role": "assistant"}]}]}, 400, "must be a string"),
    ("/score_groups", {"groups": [{"prompt": "p", "responses": ["a", ""]}]}, 422, "responses[1] is empty"),
    ("/score_groups", {"groups": [{"prompt": "p", "answers": ["a"]}]}, 400, "unknown field(s) ['answers']"),
    ("/get_reward", {"query": "not a list"}, 400, "'query' must be an array"),
    ("/get_reward", {"query": ["<EOS>"]}, 422, "query[0] is empty"),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), BAD, ids=[f"{b[0]}-{b[3]}" for b in BAD])
def test_each_bad_request_is_a_4xx_with_a_one_line_json_error(scorer, path, body, status, message):
    if isinstance(body, dict):
        body = json.dumps(body).replace("<EOS>", scorer.tokenizer.eos_token).encode()
    with client(scorer) as c:
        got = c.post(path, content=body, headers={"content-type": "application/json"})
        assert c.app.state.batcher.rounds == []  # refused before the queue: no batch ever saw it
    assert got.status_code == status, got.text
    error = got.json()["error"]
    assert message in error and "\n" not in error and set(got.json()) == {"error"}


def test_limits_on_body_bytes_and_texts_per_request(scorer):
    with client(scorer, max_body_bytes=200, max_texts=3) as c:
        big = c.post("/score", json={"texts": ["x" * 300]})
        many = c.post("/score", json={"texts": ["a", "b", "c", "d"]})
        group = c.post("/score_groups", json={"groups": [{"prompt": "p", "responses": ["a", "b"]}] * 2})
        ok = c.post("/score", json={"texts": ["a", "b", "c"]})
        unknown = c.get("/nowhere")
        wrong_method = c.get("/score")
    assert big.status_code == 413 and "--max-body-bytes 200" in big.json()["error"]
    assert many.status_code == 413
    assert "4 texts in one request, over this server's --max-texts 3" in many.json()["error"]
    assert group.status_code == 413 and "4 responses" in group.json()["error"]
    assert ok.status_code == 200
    assert unknown.status_code == 404 and unknown.json() == {"error": "Not Found"}
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()


def test_a_body_without_content_length_is_cut_off_while_read(scorer):
    def chunks():
        for _ in range(10):
            yield b" " * 100

    with client(scorer, max_body_bytes=500) as c:
        got = c.post("/score", content=chunks())
    assert got.status_code == 413 and "over this server's --max-body-bytes 500" in got.json()["error"]


def test_too_long_texts_are_cut_from_the_left_and_flagged_or_refused(short):
    """Cut by rm's one rule (the reward `rm score` gives with the same max_length), flagged per text and per
    response; with --on-too-long error the whole request is refused naming the text."""
    with client(short) as c:
        got = c.post("/score", json={"texts": [LONG, "short one"]})
        prompt = LONG + "\n\nHuman: Yes or no?\n\nAssistant:"  # a prompt ends where the answer goes
        group = c.post("/score_groups", json={"groups": [{"prompt": prompt, "responses": [" yes", " no"]}]})
    assert got.status_code == 200, got.text
    assert got.json()["truncated"] == [True, False]
    assert got.json()["rewards"] == pytest.approx([text_reference(short, t)[0] for t in (LONG, "short one")], abs=1e-5)
    assert group.json()["truncated"] == [[True, True]]
    with client(short, on_too_long="error") as c:
        refused = c.post("/score", json={"texts": ["short one", LONG]})
        fine = c.post("/score", json={"texts": ["short one"]})
    assert refused.status_code == 422
    assert refused.json()["error"].startswith("texts[1] does not fit max_length=24 tokens")
    assert fine.status_code == 200


def test_a_bad_request_among_good_ones_in_one_batch_window_fails_none_of_them(scorer):
    """Twelve good requests and a bad one sent together into a 300 ms window: the good ones are coalesced into
    shared rounds and answered with their own rewards; the bad one is refused on its own."""
    texts = [f"\n\nHuman: Add {i} and {i}.\n\nAssistant: {2 * i}." for i in range(12)]
    with client(scorer, max_wait_ms=300) as c, ThreadPoolExecutor(13) as pool:
        bad = pool.submit(c.post, "/score", json={"texts": ["ok", 7]})
        good = [pool.submit(c.post, "/score", json={"texts": [t]}) for t in texts]
        answers = [f.result() for f in good]
        rounds = list(c.app.state.batcher.rounds)
    assert bad.result().status_code == 400
    assert all(a.status_code == 200 for a in answers)
    expected = [text_reference(scorer, t)[0] for t in texts]
    assert [a.json()["rewards"][0] for a in answers] == pytest.approx(expected, abs=1e-5)
    assert sum(rounds) == 12 and max(rounds) > 1  # the good ones shared rounds; the bad one never queued


def test_a_model_error_fails_that_batch_with_a_logged_request_id_and_the_server_goes_on(scorer, caplog):
    calls = {"n": 0}
    forward = scorer.forward

    def flaky(seqs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA out of memory (simulated)")
        return forward(seqs)

    with client(scorer) as c, caplog.at_level(logging.ERROR, logger="rm.serve"):
        c.app.state.batcher.forward = flaky
        failed = c.post("/score", json={"texts": [GOOD]})
        after = c.post("/score", json={"texts": [GOOD]})
    assert failed.status_code == 500
    request_id = failed.json()["request_id"]
    assert request_id in failed.json()["error"]
    assert any(request_id in r.getMessage() and "out of memory" in r.getMessage() for r in caplog.records)
    assert after.status_code == 200
    assert after.json()["rewards"] == pytest.approx([text_reference(scorer, GOOD)[0]], abs=1e-5)


def test_group_items_stay_whole_when_encoded(scorer):
    """A group's responses are fitted together (one prompt for all), as `rm score` fits a K-response record."""
    groups = scorer.encode([ScoreText(GROUP_KEY, "\n\nHuman: hi\n\nAssistant:", r) for r in (" a", " bb")])
    assert len(groups) == 1 and len(groups[0].response_ids) == 2 and len(groups[0].prompt_ids)
