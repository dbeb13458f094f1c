"""One record, one text, one reward: training's parsers, `rm score`, `rm eval`, `rm.load(...).score` and
`/score_groups` build the same text for a record (rm/data/formats/text_rule.py), so they give the same reward.

Three records that used to come apart: a HelpSteer2 row (`prompt`, `response`, a rating), which training renders as
an HH user turn and `rm score` joined as written ("What is 2 + 3?2 plus 3 is 5."); a `responses` record whose prompt
already holds HH turns, which training wrapped a second time while `/score_groups` joined it as written; and TRL's
conversational layout (`prompt`, `chosen`, `rejected` as message lists), which `rm score` refused. An export saved
before `data.text_version` existed is still scored by the rule it was trained with. The expected reward of each is
plain transformers on the text training builds (`load_pairs`, as a run's data loading does).
"""

import json
import shutil

import pytest
import yaml
from serving import client, scorer_for

import rm
from conftest import plain_outputs
from rm.cli import main as cli_main
from rm.config import load_config
from rm.data.formats.chat import Renderer
from rm.data.formats.group import Group
from rm.data.load import load_pairs
from rm.errors import ConfigError, RecordError
from rm.evaluation.record_texts import texts_of
from rm.model.pretrained import load_reward_model

QUESTION = "What is 2 + 3?"
ROWS = [
    {"prompt": QUESTION, "response": "2 plus 3 is 5.", "helpfulness": 4},
    {"prompt": QUESTION, "response": "It is 6, I think.", "helpfulness": 1},
]
HH_PROMPT = f"\n\nHuman: {QUESTION}\n\nAssistant:"
GROUP = {"prompt": HH_PROMPT, "responses": [{"text": " 5.", "score": 2}, {"text": " Six.", "score": 0}]}
TRL = {
    "prompt": [{"role": "user", "content": QUESTION}],
    "chosen": [{"role": "assistant", "content": "2 plus 3 is 5."}],
    "rejected": [{"role": "assistant", "content": "It is 6, I think."}],
}


@pytest.fixture(scope="module")
def old_export(exported_tiny, tmp_path_factory):
    """The tiny export as an rm that predates data.text_version saved it: its rm_config.yaml has no such key."""
    folder = tmp_path_factory.mktemp("old") / "export"
    shutil.copytree(exported_tiny, folder)
    saved = yaml.safe_load((folder / "rm_config.yaml").read_text())
    saved["data"].pop("text_version", None)
    (folder / "rm_config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    return folder


def write(tmp_path, name: str, records: list[dict]):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def rm_score(export, data, tmp_path) -> list[dict]:
    out = tmp_path / (data.stem + ".scored.jsonl")
    assert cli_main(["score", "--model", str(export), "--input", str(data), "--out", str(out), "--overwrite"]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def trained_texts(export, data) -> list[tuple[str, str]]:
    """(prompt, response) of each response as training loads the file (with the export's tokenizer)."""
    _, tok = load_reward_model(str(export))
    items = load_pairs(str(data), "test", [], tokenizer=tok)
    return [(g.prompt, r) for g in items if isinstance(g, Group) for r in g.responses] or [
        (p.prompt, r) for p in items for r in (p.chosen, p.rejected)
    ]


def plain(export, texts: list[tuple[str, str]]) -> list[float]:
    _, tok = load_reward_model(str(export))
    return [plain_outputs(export, tok, p, r)[0] for p, r in texts]


def test_a_helpsteer2_row_is_scored_as_training_reads_it(exported_tiny, tmp_path):
    data = write(tmp_path, "rows.jsonl", ROWS)
    texts = trained_texts(exported_tiny, data)
    assert texts == [(HH_PROMPT, " 2 plus 3 is 5."), (HH_PROMPT, " It is 6, I think.")]  # an HH user turn
    expected = plain(exported_tiny, texts)
    assert [r["reward"] for r in rm_score(exported_tiny, data, tmp_path)] == pytest.approx(expected, abs=1e-5)
    model = rm.load(exported_tiny)
    assert [r["reward"] for r in model.score(ROWS)] == pytest.approx(expected, abs=1e-5)
    # The same prompt and responses as a group of /score_groups, and as a `responses` record for `rm score`.
    group = {"prompt": QUESTION, "responses": [r["response"] for r in ROWS]}
    with client(scorer_for(str(exported_tiny))) as c:
        got = c.post("/score_groups", json={"groups": [group]})
    assert got.status_code == 200, got.text
    assert got.json()["rewards"][0] == pytest.approx(expected, abs=1e-5)
    record = {"prompt": QUESTION, "responses": [{"text": r["response"]} for r in ROWS]}
    assert model.score(record)["rewards"] == pytest.approx(expected, abs=1e-5)


def test_a_prompt_holding_hh_turns_is_read_as_those_turns_everywhere(exported_tiny, tmp_path):
    data = write(tmp_path, "group.jsonl", [GROUP])
    texts = trained_texts(exported_tiny, data)
    assert texts == [(HH_PROMPT, " 5."), (HH_PROMPT, " Six.")]  # not wrapped in a second user turn
    expected = plain(exported_tiny, texts)
    assert rm_score(exported_tiny, data, tmp_path)[0]["rewards"] == pytest.approx(expected, abs=1e-5)
    assert rm.load(exported_tiny).score(GROUP)["rewards"] == pytest.approx(expected, abs=1e-5)
    body = {"groups": [{"prompt": HH_PROMPT, "responses": [r["text"] for r in GROUP["responses"]]}]}
    with client(scorer_for(str(exported_tiny))) as c:
        got = c.post("/score_groups", json=body)
    assert got.json()["rewards"][0] == pytest.approx(expected, abs=1e-5)
    # a HelpSteer2 row with that prompt is the same text too
    row = {"prompt": HH_PROMPT, "response": "5."}
    assert rm.load(exported_tiny).score(row)["reward"] == pytest.approx(expected[0], abs=1e-5)


@pytest.mark.slow
def test_trls_conversational_layout_is_scored_as_rm_eval_scores_it(exported_tiny, tmp_path):
    data = write(tmp_path, "trl.jsonl", [TRL])
    scored = rm_score(exported_tiny, data, tmp_path)[0]
    out = tmp_path / "eval"
    assert cli_main(["eval", "--model", str(exported_tiny), "--data", str(data), "--out", str(out)]) == 0
    evaluated = json.loads((out / "rewards.jsonl").read_text().splitlines()[0])
    got = [scored["chosen_reward"], scored["rejected_reward"]]
    assert got == pytest.approx([evaluated["chosen_reward"], evaluated["rejected_reward"]], abs=1e-5)
    assert got == pytest.approx(plain(exported_tiny, trained_texts(exported_tiny, data)), abs=1e-5)
    fields = rm.load(exported_tiny).score(TRL)
    assert [fields["chosen_reward"], fields["rejected_reward"]] == pytest.approx(got, abs=1e-5)


def test_an_export_saved_before_the_rule_keeps_its_own(old_export, tmp_path):
    """Such a run trained on `prompt + response` as written where `rm score` read a row, and on a second user turn
    around an HH prompt: its scoring keeps both, so its rewards do not move."""
    data = write(tmp_path, "rows.jsonl", ROWS[:1])
    joined = plain(old_export, [(QUESTION, ROWS[0]["response"])])
    assert [r["reward"] for r in rm_score(old_export, data, tmp_path)] == pytest.approx(joined, abs=1e-5)
    assert rm.load(old_export).score(ROWS[0])["reward"] == pytest.approx(joined[0], abs=1e-5)
    wrapped = f"\n\nHuman: {HH_PROMPT}\n\nAssistant:"  # a second user turn; each answer after the tag's space
    expected = plain(old_export, [(wrapped, "  5."), (wrapped, "  Six.")])
    scored = rm.load(old_export).score(GROUP)
    assert scored["rewards"] == pytest.approx(expected, abs=1e-5)


def test_a_prompt_holding_the_templates_own_turns_is_refused_naming_the_field():
    class ChatML:
        chat_template, bos_token = "chatml", None

        def apply_chat_template(self, rows, tokenize=False, add_generation_prompt=False):
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in rows)
            return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) for c in text]}

    renderer = Renderer(ChatML())
    record = {"prompt": "<|im_start|>user\nHi<|im_end|>\n", "response": "Hello"}
    with pytest.raises(RecordError, match="field 'prompt' already holds the chat template's turns"):
        texts_of(record, "f:1", "", renderer)
    ok = texts_of({"prompt": "Hi", "response": "Hello"}, "f:1", "", renderer)[0]
    assert (ok.prompt, ok.response) == ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "Hello<|im_end|>\n")
    with pytest.raises(RecordError, match="ends with the assistant's answer"):
        texts_of({"prompt": "\n\nHuman: Hi\n\nAssistant: Hello", "response": "x"}, "f:1", "", Renderer())


def test_text_version_is_checked_and_an_old_config_reads_as_1(tmp_path):
    with pytest.raises(ConfigError, match="data.text_version: 3 is not 1"):
        load_config(None, ["data.text_version=3"])
    assert load_config(None, []).data.text_version == 2
    from rm.config.loader import saved_text_version

    (tmp_path / "old.yaml").write_text("data:\n  split_version: 1\n")
    assert saved_text_version(tmp_path / "old.yaml") == 1
