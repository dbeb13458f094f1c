"""A run tells what happened to its data: skipped and repaired records, truncation and drops, in the
log and in its run directory (`data_report.json`, `skipped.jsonl`); in error mode it stops first."""

import json
import logging

import pytest

from conftest import REPO, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config
from rm.training.run import main

QUICKSTART = REPO / "configs" / "quickstart.yaml"
TINY = [
    *TINY_MODEL,
    "train.batch_size=4",
    "train.max_steps=1",
    "train.report_to=[]",
    "export.enabled=false",
    "collator.max_length=64",
]


def conv(*turns):
    return "".join(f"\n\nHuman: {h}\n\nAssistant: {a}" for h, a in turns)


@pytest.fixture()
def source(tmp_path):
    """train: 12 good pairs, one whose prompt is long (10 turns), one whose answer alone is too long,
    one malformed line and one identical pair; test: 4 good pairs."""
    good = [json.dumps({"chosen": conv((f"q{i}", f"yes {i}")), "rejected": conv((f"q{i}", "no"))}) for i in range(16)]
    history = [(f"question number {j}", f"answer number {j}") for j in range(10)]
    long_prompt = {"chosen": conv(*history, ("last", "fine")), "rejected": conv(*history, ("last", "bad"))}
    long_answer = {"chosen": conv(("q", "word " * 100)), "rejected": conv(("q", "no"))}
    identical = {"chosen": conv(("q", "a")), "rejected": conv(("q", "a"))}
    lines = good[:12] + [json.dumps(long_prompt), json.dumps(long_answer), '{"chosen": ', json.dumps(identical)]
    folder = tmp_path / "data" / "harmless-base"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "test.jsonl").write_text("\n".join(good[12:]) + "\n")
    return folder.parent


@pytest.mark.slow
def test_skip_mode_run_writes_the_data_report_and_logs_the_counts(source, tmp_path, caplog):
    out = tmp_path / "run"
    caplog.set_level(logging.INFO, logger="rm")
    cfg = load_config(QUICKSTART, TINY + [f"data.source={source}", "data.on_bad_record=skip", f"output_dir={out}"])
    main(cfg)
    report = json.loads((out / "data_report.json").read_text())
    assert report["skipped"] == {"identical": 1, "malformed_json": 1} and report["repaired"] == {}
    assert report["pairs"] == {"train": {"harmless-base": 14}, "eval": {"harmless-base": 4}}
    train = report["encoding"]["train"]
    assert (train["kept"], train["prompt_truncated"], train["dropped_too_long"]) == (13, 1, 1)
    assert train["dropped_too_long_origins"] == ["harmless-base/train.jsonl:14"]  # by subset folder: no machine path
    assert report["encoding"]["eval"]["kept"] == 4 and report["encoding"]["max_length"] == 64
    rows = [json.loads(line) for line in (out / "skipped.jsonl").read_text().splitlines()]
    assert [(r["action"], r["reason"], r["origin"].rsplit(":", 1)[1]) for r in rows] == [
        ("skipped", "malformed_json", "15"),
        ("skipped", "identical", "16"),
    ]
    assert "skipped 2 bad records {'identical': 1, 'malformed_json': 1}" in caplog.text
    assert "1 pairs dropped" in caplog.text


def test_error_mode_stops_before_training_with_file_line_and_field(source, tmp_path, capsys):
    out = tmp_path / "run"
    code = cli(["train", str(QUICKSTART), *TINY, f"data.source={source}", f"output_dir={out}"])
    assert code == 2
    assert f"{source}/harmless-base/train.jsonl:15: malformed JSON" in capsys.readouterr().err
    assert not (out / "tokenizer").exists() and not (out / "eval.json").exists()
