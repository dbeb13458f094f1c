"""ProcessBench from the command line and during training: `rm eval --suite processbench` on an rm PRM export
(read at the separator its config records) prints the paper's F1 beside the detection F1 and writes its files,
refuses what does not apply, and a training run's `train.eval_suites` logs the numbers `rm eval` gives its export."""

import json
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import QUICKSTART, SHORT, tiny_model
from rm.cli import main as cli
from rm.config import RunConfig, load_config
from rm.evaluation.eval_report import EvalOptions
from rm.export.folder import ExportOptions, Weights, export_model
from rm.model.reward import RewardModel
from rm.suites.steps.bench_eval import score_bench
from rm.suites.suite_eval import SuiteData
from rm.training.run import main as train

BENCH = Path(__file__).resolve().parent / "fixtures" / "processbench"
SEPARATOR = " ки\n"


@pytest.fixture(scope="module")
def prm_export(tokenizer, tmp_path_factory):
    """A tiny random Llama exported as rm exports a process reward model (a token classifier recording its step
    separator), and the same weights in memory."""
    hf = tiny_model(tokenizer, seed=5)
    with torch.no_grad():
        hf.score.weight.normal_(0, 1.0)
    out = export_model(hf, tokenizer, tmp_path_factory.mktemp("prm") / "export", RunConfig(), Weights(None, None),
                       options=ExportOptions(step_separator=SEPARATOR))  # fmt: skip
    return out, RewardModel(tiny_model(tokenizer, seed=5).eval()), hf


@pytest.mark.slow
def test_rm_eval_reads_an_rm_prm_export_at_its_separator_and_prints_both_f1s(prm_export, tokenizer, tmp_path, capsys):
    export, _, hf = prm_export
    out = tmp_path / "eval"
    argv = ["eval", "--model", str(export), "--suite", "processbench", "--data", str(BENCH), "--out", str(out)]
    assert cli([*argv, "--batch-size", "4", "--max-length", "512"]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((out / "eval.json").read_text())
    assert saved["eval"]["step_separator"] == SEPARATOR and saved["eval"]["step_separator_from"] == "the model's config"
    assert f"ProcessBench F1 {saved['suite']['score']:.4f}" in printed and "not the paper's F1" in printed
    assert all(f"\n{split} " in printed for split in ("gsm8k", "math", "olympiadbench", "omnimath"))
    rows = [json.loads(line) for line in (out / "step_scores.jsonl").read_text().splitlines()]
    # the export's steps are the in-memory model's read at the same separator
    same = score_bench("memory", SuiteData(source=str(BENCH), step_separator=SEPARATOR),
                       EvalOptions(max_length=512), (RewardModel(hf).eval(), tokenizer))  # fmt: skip
    for row, probs in zip(rows, same.probs, strict=True):
        assert row["step_probs"] == pytest.approx(probs, abs=1e-5)
    assert (out / "report.md").is_file() and not (out / "report.html").exists()


def test_options_that_do_not_apply_are_refused_in_one_line(prm_export, tmp_path, capsys):
    export = str(prm_export[0])
    base = ["eval", "--model", export, "--suite", "processbench", "--data", str(BENCH), "--out", str(tmp_path)]
    assert cli([*base, "--chat-template", "hh"]) == 2
    assert "--chat-template does not apply to --suite processbench" in capsys.readouterr().err
    assert cli([*base, "--split", "gsm8k", "--subsets", "math"]) == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_logs_processbench_at_each_eval_as_rm_eval_scores_its_export(tmp_path):
    """collator.max_length 512 holds every fixture solution whole (the quickstart's 128 cuts most of them), so
    every split has an F1 to log."""
    suites = f"[{{suite: processbench, data: {BENCH}}}]"
    longer = ["model.random_init.max_position_embeddings=512", "collator.max_length=512"]
    cfg = load_config(QUICKSTART, [*SHORT, *longer, "train.eval_steps=1", "train.report_to=[tensorboard]",
                                   f"train.eval_suites={suites}", f"output_dir={tmp_path}"])  # fmt: skip
    train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "suites.jsonl").read_text().splitlines()]
    assert [(r["step"], r["suite"]) for r in rows] == [(1, "processbench"), (2, "processbench")]
    assert set(rows[-1]["sections"]) == {"gsm8k", "math", "olympiadbench", "omnimath"}
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    for tag in ("suite/processbench/score", "suite/processbench/gsm8k"):
        assert [e.step for e in events.Scalars(tag)] == [1, 2], tag
    final = score_bench(str(tmp_path / "export"), SuiteData(source=str(BENCH)), EvalOptions()).result["suite"]
    assert rows[-1]["score"] == pytest.approx(final["score"], abs=1e-6)
    assert rows[-1]["sections"] == pytest.approx(final["sections"], abs=1e-6)
