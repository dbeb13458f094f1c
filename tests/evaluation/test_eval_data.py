"""`rm eval` reads data as training does: message lists rendered with the model's chat template, the
same data options (format, columns, Argilla keys), and bad records skipped and reported."""

import gzip
import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from conftest import HH_HARMLESS_TEST, plain_transformers_rewards
from rm.cli import main as cli
from rm.data.data_report import shown_path

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|> {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CONVERSATIONS = [
    ("What is two plus two?", "It is four.", "It is five."),
    ("Name a colour of the sky.", "Blue, on a clear day.", "Purple with green dots."),
    ("Is water wet?", "Yes, in the everyday sense.", "Never."),
    ("Say hello.", "Hello!", "Goodbye forever."),
]


@pytest.fixture(scope="module")
def chat_model(exported_tiny, tmp_path_factory):
    """The tiny export with a chat template added to its tokenizer."""
    folder = tmp_path_factory.mktemp("chat") / "export"
    shutil.copytree(exported_tiny, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


def conversation(prompt, answer):
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]


@pytest.mark.slow
def test_eval_renders_conversations_with_the_models_chat_template(chat_model, tmp_path, capsys):
    """The reference is independent of rm's data path: the whole conversation rendered by transformers'
    apply_chat_template and scored by plain transformers."""
    data = tmp_path / "conv.jsonl"
    rows = [{"chosen": conversation(q, c), "rejected": conversation(q, r)} for q, c, r in CONVERSATIONS]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = cli(["eval", "--model", str(chat_model), "--data", str(data), "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    got = [json.loads(line) for line in (tmp_path / "out" / "rewards.jsonl").read_text().splitlines()]

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    texts = [tokenizer.apply_chat_template(r[side], tokenize=False) for r in rows for side in ("chosen", "rejected")]
    expected = plain_transformers_rewards(chat_model, texts).tolist()
    for i, row in enumerate(got):
        assert row["chosen_reward"] == pytest.approx(expected[2 * i], abs=1e-4)
        assert row["rejected_reward"] == pytest.approx(expected[2 * i + 1], abs=1e-4)
    hh = [f"\n\nHuman: {q}\n\nAssistant: {c}" for q, c, _ in CONVERSATIONS]
    assert plain_transformers_rewards(chat_model, hh).tolist() != pytest.approx([r["chosen_reward"] for r in got])


@pytest.mark.slow
def test_eval_has_the_data_options_of_train(exported_tiny, tmp_path, capsys):
    """--columns maps renamed fields, --format forces a format, --set passes any data.* key."""
    data = tmp_path / "renamed.jsonl"
    rows = [{"question": q, "good": c, "bad": r} for q, c, r in CONVERSATIONS]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["eval", "--model", str(exported_tiny), "--data", str(data), "--bootstrap-samples", "50"]
    out = tmp_path / "out"
    args = [*base, "--out", str(out), "--columns", "prompt=question,chosen=good", "--set", "columns.rejected=bad"]
    assert cli([*args, "--format", "prompt"]) == 0, capsys.readouterr().err
    assert json.loads((out / "eval.json").read_text())["overall"]["n"] == len(CONVERSATIONS)
    assert cli([*base, "--out", str(tmp_path / "x"), "--columns", "nonsense=good"]) == 2
    assert "data.columns.nonsense" in capsys.readouterr().err


@pytest.mark.skipif(not HH_HARMLESS_TEST.is_file(), reason="needs the shared HH file")
@pytest.mark.slow
def test_skip_mode_reports_the_skipped_records(exported_tiny, tmp_path, capsys):
    """The shipped HH test file has 4 records with an empty answer: skip mode says so, in eval.json and
    on the console, instead of dropping them silently."""
    sample = tmp_path / "hh.jsonl"
    with gzip.open(HH_HARMLESS_TEST, "rt", encoding="utf-8") as f:
        lines = f.readlines()

    def empty_answer(line):
        record = json.loads(line)
        return any(not record[k].rsplit("Assistant:", 1)[-1].strip() for k in ("chosen", "rejected"))

    bad = [i for i, line in enumerate(lines) if empty_answer(line)]
    assert bad
    keep = sorted(set(range(30)) | set(bad))
    sample.write_text("".join(lines[i] for i in keep))
    out = tmp_path / "out"
    args = ["eval", "--model", str(exported_tiny), "--data", str(sample), "--out", str(out)]
    assert cli([*args, "--on-bad-record", "skip", "--bootstrap-samples", "50"]) == 0
    console = capsys.readouterr().out
    saved = json.loads((out / "eval.json").read_text())["eval"]
    n_bad = sum(saved["records_skipped"].values())
    assert n_bad >= len(bad) and f"skipped {n_bad} bad records" in console
    assert {b["origin"] for b in saved["skipped"]} >= {f"{shown_path(str(sample))}:{keep.index(i) + 1}" for i in bad}


def test_holdout_takes_the_split_rule_of_the_run_that_trained_the_model(tmp_path):
    """An export of a run trained before data.split_version existed held out by record (1); a newer one says its
    rule in rm_config.yaml; --set wins; a model rm did not train gets the default (3, by prompt across subsets)."""
    from rm.cli import build_parser
    from rm.cli.evaluate import eval_data

    def version(model: Path, *flags: str) -> int:
        args = ["eval", "--model", str(model), "--data", "prefs.jsonl", "--holdout", "0.1", *flags]
        return eval_data(build_parser().parse_args(args)).split_version

    old, new, foreign = tmp_path / "old", tmp_path / "new", tmp_path / "foreign"
    for folder in (old, new, foreign):
        folder.mkdir()
    (old / "rm_config.yaml").write_text("data:\n  source: prefs.jsonl\n")
    (new / "rm_config.yaml").write_text("data:\n  source: prefs.jsonl\n  split_version: 2\n")
    assert version(old) == 1 and version(new) == 2 and version(foreign) == 3
    assert version(old, "--set", "split_version=2") == 2
