"""/classify and /pooling answer vLLM 0.34.0's bodies (vllm/entrypoints/pooling/{classify,pooling}/protocol.py) with
/score's rewards: the bodies as written from vLLM's code here, and checked against vLLM's own pydantic classes by
scripts/clients/check_vllm_bodies.py where a venv with vLLM's protocol modules exists ($RM_VLLM_PYTHON, else
$CLIENT_VENVS/rm-client-vllm or $CLIENT_VENVS/vllm, CLIENT_VENVS defaulting to /work/venvs); skipped without it."""

import json
import math
import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from serving import client, scorer_for, with_chat_template

from rm.evaluation.record_texts import texts_of
from rm.serve.vllm_api.vllm_requests import without_bos

REPO = Path(__file__).resolve().parents[2]
CONVO = "\n\nHuman: What is 2 plus {a}?\n\nAssistant: It is {b}."
TEXTS = [CONVO.format(a=i, b=i + 2) for i in range(4)] + ["no tags, just a text"]
CHAT = [{"role": "user", "content": "What is 2 plus 2?"}, {"role": "assistant", "content": "It is 4."}]
RECORDED: list[dict] = []
"""Bodies sent and answered here, checked against vLLM's classes by the last test."""


def post(c, route: str, body: dict) -> dict:
    """The answer to a body the server accepts; both recorded."""
    got = c.post(f"/{route}", json=body)
    assert got.status_code == 200, got.text
    RECORDED.append({"what": "request", "route": route, "body": body})
    RECORDED.append({"what": "response", "route": route, "body": got.json()})
    return got.json()


@pytest.fixture(scope="module")
def scorer(exported_tiny):
    return scorer_for(str(exported_tiny))


@pytest.fixture(scope="module")
def templated(exported_tiny, tmp_path_factory):
    """The tiny export with a chat template: conversations are rendered with it, as /score renders them."""
    return scorer_for(str(with_chat_template(exported_tiny, tmp_path_factory.mktemp("vllm_chat") / "export")))


def test_classify_answers_score_rewards_in_vllm_body(scorer):
    with client(scorer) as c:
        rewards = c.post("/score", json={"texts": TEXTS}).json()["rewards"]
        got = post(c, "classify", {"model": "rm", "input": TEXTS, "use_activation": False, "add_special_tokens": False})
        one = post(c, "classify", {"input": TEXTS[1], "request_id": "abc"})
    assert len(set(rewards)) == len(TEXTS)  # distinct: a mix-up of order would show
    assert [d["probs"][0] for d in got["data"]] == pytest.approx(rewards, abs=1e-5)
    assert [(d["index"], d["label"], d["num_classes"], len(d["probs"])) for d in got["data"]] == [
        (i, "reward", 1, 1) for i in range(len(TEXTS))
    ]
    assert got["object"] == "list" and got["id"].startswith("classify-") and got["model"] == scorer.name
    assert abs(got["created"] - time.time()) < 60
    assert one["id"] == "classify-abc" and one["data"][0]["probs"] == pytest.approx([rewards[1]], abs=1e-5)


def test_pooling_data_is_the_classify_probs(scorer):
    with client(scorer) as c:
        rewards = c.post("/score", json={"texts": TEXTS}).json()["rewards"]
        got = post(c, "pooling", {"input": TEXTS, "task": "classify", "encoding_format": "float"})
    assert [len(d["data"]) for d in got["data"]] == [1] * len(TEXTS)
    assert [d["data"][0] for d in got["data"]] == pytest.approx(rewards, abs=1e-5)
    assert [(d["index"], d["object"]) for d in got["data"]] == [(i, "pooling") for i in range(len(TEXTS))]
    assert got["id"].startswith("pool-") and got["object"] == "list"


def test_usage_counts_each_texts_scored_tokens(scorer):
    """Counted another way: the tokenizer's own ids for the prompt and the response `rm score` reads, and its prefix."""
    tok = scorer.tokenizer
    expected = 0
    for t in TEXTS:
        (text,) = texts_of({"text": t}, "t")
        expected += len(scorer.prefix) + len(tok(text.prompt, add_special_tokens=False)["input_ids"])
        expected += len(tok(text.response, add_special_tokens=False)["input_ids"])
    with client(scorer) as c:
        got = post(c, "classify", {"input": TEXTS})["usage"]
    assert got == {"prompt_tokens": expected, "total_tokens": expected, "completion_tokens": 0,
                   "completion_tokens_details": None}  # fmt: skip


def test_texts_sharing_a_prompt_are_batched_as_score_batches_them(scorer):
    """The same preparation and batcher as /score: one prompt's completions sent flat compute it once (the model
    thread's token count equals /score's for the same texts), each with the reward it gets alone."""
    prompt = "\n\nHuman: Name a colour of the sky and say why it looks that way.\n\nAssistant:"
    texts = [prompt + a for a in (" Blue.", " Grey, on a day of rain.", " Red at dusk.")]
    with client(scorer) as c:
        rewards = c.post("/score", json={"texts": texts}).json()["rewards"]
        score_tokens = c.get("/info").json()["tokens"]
    with client(scorer) as c:
        got = post(c, "classify", {"input": texts})
        classify_tokens = c.get("/info").json()["tokens"]
    assert [d["probs"][0] for d in got["data"]] == pytest.approx(rewards, abs=1e-5)
    assert classify_tokens == score_tokens
    prompt_ids = len(scorer.encode(texts_of({"text": texts[0]}, "t"))[0].prompt_ids)
    assert classify_tokens == got["usage"]["prompt_tokens"] - 2 * prompt_ids  # the prompt computed once, not 3 times


def test_messages_are_rendered_as_score_renders_them(templated):
    pieces = [{"type": "text", "text": "It is"}, {"type": "text", "text": "4."}]
    parts = [CHAT[0], {"role": "assistant", "content": pieces}]
    with client(templated) as c:
        rewards = c.post("/score", json={"messages": [CHAT, [CHAT[0], {"role": "assistant", "content": "It is\n4."}]]})
        rewards = rewards.json()["rewards"]
        got = [post(c, route, {"messages": m})["data"][0] for m in (CHAT, parts) for route in ("classify", "pooling")]
    assert [got[0]["probs"][0], got[1]["data"][0], got[2]["probs"][0]] == pytest.approx(
        [rewards[0], rewards[0], rewards[1]], abs=1e-5
    )
    assert rewards[0] != pytest.approx(rewards[1], abs=1e-6)


def test_attribute_outputs_follow_the_reward(attribute_export):
    scorer = scorer_for(str(attribute_export))
    with client(scorer) as c:
        score = c.post("/score", json={"texts": TEXTS[:2]}).json()
        got = post(c, "classify", {"input": TEXTS[:2]})["data"]
    for k, item in enumerate(got):
        want = [score["rewards"][k], *score["attributes"][k].values()]
        assert item["probs"] == pytest.approx(want, abs=1e-5) and item["num_classes"] == 3
        labels = ["reward", *score["attributes"][k]]
        assert item["label"] == labels[max(range(3), key=lambda i: want[i])]


def test_a_model_without_problem_type_gets_vllms_sigmoid(exported_tiny, tmp_path):
    """vLLM's rule for a one-label model read as classification: sigmoid of the logit, the raw logit with
    use_activation false; an rm export (problem_type regression) gets the raw reward either way (the tests above)."""
    folder = tmp_path / "export"
    shutil.copytree(exported_tiny, folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("problem_type")
    (folder / "config.json").write_text(json.dumps(config))
    scorer = scorer_for(str(folder))
    with client(scorer) as c:
        rewards = c.post("/score", json={"texts": TEXTS}).json()["rewards"]
        default = post(c, "classify", {"input": TEXTS, "use_activation": True})["data"]
        raw = post(c, "pooling", {"input": TEXTS, "use_activation": False})["data"]
    assert [d["probs"][0] for d in default] == pytest.approx([1 / (1 + math.exp(-r)) for r in rewards], abs=1e-6)
    assert [d["data"][0] for d in raw] == pytest.approx(rewards, abs=1e-5)


BAD = [  # route, body, status, param, whether vLLM's request classes refuse the body too
    ("classify", b"{not json", 400, None, False),
    ("classify", {}, 400, "input", True),
    ("classify", {"input": "a", "messages": CHAT}, 400, "input", False),
    ("classify", {"input": [1, 2, 3]}, 400, "input", False),
    ("classify", {"input": [[1, 2], [3]]}, 400, "input", False),
    ("classify", {"input": []}, 400, "input", False),
    ("classify", {"input": 5}, 400, "input", True),
    ("classify", {"input": "a", "use_activation": "maybe"}, 400, "use_activation", True),
    ("classify", {"input": "a", "padding": "wide"}, 400, "padding", True),
    ("classify", {"input": "a", "normalize": True}, 400, "normalize", True),
    ("classify", {"input": "a", "add_special_tokens": None}, 400, "add_special_tokens", True),
    ("classify", {"input": "a", "truncate_prompt_tokens": 8}, 400, "truncate_prompt_tokens", False),
    ("classify", {"messages": CHAT, "add_generation_prompt": True}, 400, "add_generation_prompt", False),
    ("classify", {"messages": CHAT, "chat_template": "{{ x }}"}, 400, "chat_template", False),
    ("pooling", {"input": "a", "task": "embed"}, 400, "task", False),
    ("pooling", {"input": "a", "task": "score"}, 400, "task", True),
    ("pooling", {"input": "a", "encoding_format": "base64"}, 400, "encoding_format", False),
    ("pooling", {"input": "a", "dimensions": 8}, 400, "dimensions", False),
    ("classify", {"input": ["fine", "  "]}, 422, None, False),
    ("classify", {"messages": [CHAT[0]]}, 422, None, False),
    ("pooling", {"input": ["a", "b", "c"]}, 413, None, False),
]


@pytest.mark.parametrize(("route", "body", "status", "param", "vllm_too"), BAD)
def test_bad_bodies_get_a_4xx_in_vllms_error_shape(scorer, route, body, status, param, vllm_too):
    with client(scorer, max_texts=2) as c:
        got = c.post(f"/{route}", content=body if isinstance(body, bytes) else json.dumps(body))
    assert got.status_code == status, got.text
    error = got.json()["error"]
    assert set(got.json()) == {"error"} and set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and error["param"] == param and "\n" not in error["message"]
    assert error["type"] == {400: "BadRequestError", 422: "UnprocessableEntityError"}.get(
        status, "Request Entity Too Large"
    )
    if vllm_too:
        RECORDED.append({"what": "refused", "route": route, "body": body})
    RECORDED.append({"what": "error", "route": route, "body": got.json()})


def test_unknown_fields_are_ignored_as_vllm_ignores_them_and_info_lists_the_routes(scorer):
    with client(scorer) as c:
        got = post(c, "classify", {"input": TEXTS[0], "user": "u", "priority": 0, "not_vllms": 1})
        wrong_method = c.get("/classify")
        routes = c.get("/info").json()["routes"]
    assert got["data"][0]["num_classes"] == 1
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == 405
    assert {"/classify", "/pooling"} <= set(routes)


def test_a_bos_text_in_front_is_not_counted_twice():
    with_bos = SimpleNamespace(tokenizer=SimpleNamespace(bos_token="<s>"), prefix=[1])
    without = SimpleNamespace(tokenizer=SimpleNamespace(bos_token="<s>"), prefix=[])
    assert without_bos("<s>\n\nHuman: Hi", with_bos) == "\n\nHuman: Hi"
    assert without_bos("<s>\n\nHuman: Hi", without) == "<s>\n\nHuman: Hi"  # no BOS added: the text is kept
    assert without_bos("\n\nHuman: <s>", with_bos) == "\n\nHuman: <s>"


def vllm_python() -> str | None:
    if os.environ.get("RM_VLLM_PYTHON"):
        return os.environ["RM_VLLM_PYTHON"]
    venvs = Path(os.environ.get("CLIENT_VENVS", "/work/venvs"))
    found = [venvs / name / "bin" / "python" for name in ("rm-client-vllm", "vllm")]
    return next((str(p) for p in found if p.exists()), None)


def test_bodies_validate_with_vllms_own_classes(tmp_path):
    """Runs last in this file: every body recorded above, through vLLM 0.34.0's protocol classes."""
    python = vllm_python()
    if python is None:
        pytest.skip("no venv with vLLM's protocol modules: set RM_VLLM_PYTHON (scripts/clients/check_vllm_bodies.py)")
    kinds = {b["what"] for b in RECORDED}
    assert {"request", "response", "error", "refused"} <= kinds, kinds  # the tests above ran
    path = tmp_path / "bodies.json"
    path.write_text(json.dumps(RECORDED))
    script = REPO / "scripts" / "clients" / "check_vllm_bodies.py"
    done = subprocess.run([python, str(script), "--bodies", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 failed" in done.stdout
