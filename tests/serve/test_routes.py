"""Every route answers with `rm score`'s rewards: /score (texts and conversations), /score_groups (text and message
prompts, in both layouts), /get_reward (OpenRLHF's request as its client sends it), /health, /info, --normalize."""

import json
import shutil
from pathlib import Path

import pytest
from serving import client, padded, scorer_for, text_reference, with_chat_template

import rm
from rm.collate import scoring
from rm.evaluation.record_texts import GROUP_KEY, ScoreText, texts_of
from rm.evaluation.score_file import score_file

HERE = Path(__file__).parent
CONVO = "\n\nHuman: What is 2 plus {a}?\n\nAssistant: It is {b}."
TEXTS = [CONVO.format(a=i, b=i + 2) for i in range(5)] + ["no tags, just a text", "\n\nHuman: Hi.\n\nAssistant: Hello."]


@pytest.fixture(scope="module")
def scorer(exported_tiny):
    return scorer_for(str(exported_tiny))


@pytest.fixture(scope="module")
def chat_export(exported_tiny, tmp_path_factory):
    """The tiny export with a chat template: conversations are rendered with it, as `rm score` renders them."""
    return with_chat_template(exported_tiny, tmp_path_factory.mktemp("chat") / "export")


def rm_score(scorer, records: list[dict], tmp_path) -> list[dict]:
    """`rm score`'s own output for these records (score_file, the function behind the command)."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    score_file(scorer.model, scorer.tokenizer, src, out, max_length=scorer.max_length, progress=False, overwrite=True)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_score_texts_equal_rm_score_on_text_records(scorer, tmp_path):
    expected = [r["reward"] for r in rm_score(scorer, [{"text": t} for t in TEXTS], tmp_path)]
    with client(scorer) as c:
        got = c.post("/score", json={"texts": TEXTS})
    assert got.status_code == 200, got.text
    assert got.json()["rewards"] == pytest.approx(expected, abs=1e-5)
    assert got.json()["truncated"] == [False] * len(TEXTS)
    assert len(set(expected)) == len(TEXTS)  # distinct rewards: a mix-up of order would show


@pytest.mark.parametrize("route", ["/score", "/get_reward"])
def test_flat_texts_of_one_prompt_compute_it_once_with_each_texts_own_reward(scorer, route, tmp_path):
    """GRPO batches sent flat: completions of two prompts, interleaved and of lengths that interleave too (so
    sorting by length alone would not put a prompt's texts side by side), and a lone text. The server scores
    each prompt's texts as a group (its tokens counted once in /info) and each reward is still the text's
    alone, in the request's order."""
    sky = "\n\nHuman: Name a colour of the sky and say why it looks that way.\n\nAssistant:"
    sea = "\n\nHuman: Name a colour of the sea and say why it looks that way.\n\nAssistant:"
    answers = [" Blue.", " Blue, from how air scatters light.", " Grey.", " Red at dusk, and blue by day."]
    texts = [p + a for a in answers for p in (sky, sea)] + [TEXTS[6]]
    expected = [r["reward"] for r in rm_score(scorer, [{"text": t} for t in texts], tmp_path)]
    body = {"texts": texts} if route == "/score" else {"query": texts, "prompts": texts}
    with client(scorer) as c:
        got = c.post(route, json=body)
        tokens = c.get("/info").json()["tokens"]
    assert got.status_code == 200, got.text
    assert got.json()["rewards"] == pytest.approx(expected, abs=1e-5)
    assert len(set(expected)) == len(texts)  # distinct rewards: a mix-up of order would show
    items = [scorer.encode(texts_of({"text": t}, "request")) for t in texts]  # as the server reads them
    assert all(len(item) == 1 and len(item[0].response_ids) == 1 for item in items)  # each text a group of one
    each, last = [item[0] for item in items[:-1]], items[-1][0]
    lengths = [scoring.tokens(g) for g in each]
    assert lengths != sorted(lengths) and len(set(lengths)) > 2  # the two prompts' lengths interleave
    once = {tuple(g.prompt_ids): len(g.prompt_ids) for g in each}
    assert len(once) == 2
    assert tokens == sum(once.values()) + sum(len(g.response_ids[0]) for g in each) + scoring.tokens(last)


@pytest.mark.parametrize("chat", [False, True], ids=["hh-text", "chat-template"])
def test_conversations_and_message_groups_equal_rm_score_on_responses_records(scorer, chat_export, chat, tmp_path):
    """A message-list group is what `rm score` scores in a `responses` record (rewards in response order); a
    conversation to /score is that record's prompt with its final assistant turn as the response."""
    model = scorer_for(str(chat_export)) if chat else scorer
    prompt = [{"role": "user", "content": "What is 2 plus 2?"}, {"role": "assistant", "content": "Four?"}]
    prompt += [{"role": "user", "content": "Sure?"}]
    answers = ["Yes, four.", "No, five.", "Maybe six, or seven."]
    record = {"prompt": prompt, "responses": [{"text": a, "score": -k} for k, a in enumerate(answers)]}
    expected = rm_score(model, [record], tmp_path)[0]["rewards"]
    responses = [
        answers[0],
        {"role": "assistant", "content": answers[1]},
        [{"role": "assistant", "content": answers[2]}],
    ]
    with client(model) as c:
        groups = c.post("/score_groups", json={"groups": [{"prompt": prompt, "responses": responses}]})
        convos = c.post("/score", json={"messages": [[*prompt, {"role": "assistant", "content": a}] for a in answers]})
    assert groups.status_code == 200, groups.text
    assert groups.json()["rewards"][0] == pytest.approx(expected, abs=1e-5)
    assert convos.json()["rewards"] == pytest.approx(expected, abs=1e-5)
    if chat:  # the template really was used: its text differs from HH text, and so do the rewards
        assert expected != pytest.approx(rm_score(scorer, [record], tmp_path)[0]["rewards"], abs=1e-4)


@pytest.mark.parametrize("layout", ["shared", "padded"])
def test_text_groups_are_prompt_plus_response_in_both_layouts(scorer, layout):
    """A text prompt's responses are scored as prompt + response; groups answer in request order, an empty group
    with an empty list."""
    model = scorer if layout == "shared" else padded(scorer)
    assert model.layout_name == layout
    groups = [
        {"prompt": "\n\nHuman: Say hi.\n\nAssistant:", "responses": [" Hi!", " Hello there.", " Hi!"]},
        {"prompt": "\n\nHuman: Count to three.\n\nAssistant:", "responses": [" 1 2 3"]},
        {"prompt": "", "responses": []},
    ]
    with client(model) as c:
        got = c.post("/score_groups", json={"groups": groups})
    assert got.status_code == 200, got.text
    rewards = got.json()["rewards"]
    for g, group in enumerate(groups):
        expected = [text_reference(scorer, group["prompt"] + r)[0] for r in group["responses"]]
        assert rewards[g] == pytest.approx(expected, abs=1e-5)
    assert got.json()["truncated"] == [[False] * 3, [False], []]


def test_openrlhf_recorded_request_gets_the_answer_its_client_reads(scorer):
    """The request OpenRLHF 0.11.2's SingleTurnAgentExecutor posts (one decoded rollout: prompt, response and
    the EOS text its decode keeps; `prompts` and `labels` beside it), recorded in openrlhf_get_reward.json. Its
    client reads `rewards`, then `scores` (falling back to `rewards`) and `extra_logs` (a dict of metrics)."""
    recorded = json.loads((HERE / "openrlhf_get_reward.json").read_text())
    eos = scorer.tokenizer.eos_token
    request = json.loads(json.dumps(recorded["request"]).replace("<EOS>", eos))
    with client(scorer) as c:
        got = c.post("/get_reward", json=request)
    assert got.status_code == 200, got.text
    body = got.json()
    assert set(recorded["response_keys"]) <= set(body)
    clean = [q.replace(eos, "") for q in request["query"]]
    expected = [text_reference(scorer, q)[0] for q in clean]
    assert body["rewards"] == pytest.approx(expected, abs=1e-5)
    assert body["scores"] == body["rewards"] and body["extra_logs"] == {}
    assert isinstance(body["rewards"][0], float)


def test_health_and_info(scorer):
    with client(scorer, max_texts=7, on_too_long="error") as c:
        assert c.get("/health").json() == {"status": "ok"}
        before = c.get("/info").json()
        c.post("/score_groups", json={"groups": [{"prompt": "Hi.", "responses": ["a", "bb", "ccc"]}]})
        info = c.get("/info").json()
    assert (before["scored"], before["tokens"], before["busy_seconds"]) == (0, 0, 0.0)
    hh = "\n\nHuman: Hi.\n\nAssistant:"  # a text prompt is the user's turn (rm/data/formats/text_rule.py)
    (group,) = scorer.encode([ScoreText(GROUP_KEY, hh, " " + r) for r in ["a", "bb", "ccc"]])
    prompt_once = len(group.prompt_ids) + sum(len(r) for r in group.response_ids)
    assert info.pop("scored") == 3 and info.pop("tokens") == prompt_once and info.pop("busy_seconds") > 0
    assert (info.pop("requests"), info.pop("groups"), info.pop("prompt_tokens")) == (1, 1, len(group.prompt_ids))
    assert info == {
        "model": scorer.name,
        "max_length": 512,
        "truncation_side": "left",
        "normalize": None,
        "attributes": [],
        "layout": "shared",
        "group_layout": "prefix-cache",
        "weights": "",  # an export: its model card says which weights
        "on_too_long": "error",
        "max_texts": 7,
        "max_body_bytes": 8 << 20,
        "routes": ["/score", "/score_groups", "/get_reward", "/score_steps", "/classify", "/pooling"],
        "step_separator": "\n\n",  # a reward export's: its run's data.step_separator, the default
        "version": rm.__version__,
    }


def test_normalize_applies_the_exports_recorded_mean_and_std(exported_tiny, tmp_path):
    """As the export's card documents: normalized = (raw - mean) / std, with config.json's recorded statistics."""
    folder = tmp_path / "normalized"
    shutil.copytree(exported_tiny, folder)
    config = json.loads((folder / "config.json").read_text())
    norm = {"mean": 0.25, "std": 2.0, "n_rewards": 10, "data": "test"}
    config |= {"reward_normalization": norm, "mean": 0.25, "std": 2.0}
    (folder / "config.json").write_text(json.dumps(config))
    raw = scorer_for(str(exported_tiny))
    normalized = scorer_for(str(folder), normalize=True)
    with client(raw) as c:
        raw_rewards = c.post("/score", json={"texts": TEXTS[:3]}).json()["rewards"]
    with client(normalized) as c:
        got = c.post("/score", json={"texts": TEXTS[:3]}).json()["rewards"]
        assert c.get("/info").json()["normalize"] == {"mean": 0.25, "std": 2.0}
    assert got == pytest.approx([(r - 0.25) / 2.0 for r in raw_rewards], abs=1e-6)


def test_normalize_without_recorded_statistics_is_refused(exported_tiny):
    with pytest.raises(rm.errors.ConfigError, match="records no reward mean and std"):
        scorer_for(str(exported_tiny), normalize=True)
