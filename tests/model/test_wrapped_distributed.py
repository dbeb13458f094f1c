"""A wrapped architecture with per-layer-type masks under DDP: Cohere 2 (rm's head; alternating 16-token
sliding-window and full layers, so the shared layout gets a dict of masks), 2 processes at batch 4
against 1 process at batch 8, the 2 processes launched as users launch (the `wrapped` scenario of the
session's shared launch, tests/launched/scenarios.py). The argument for equal losses and the 1e-5
tolerance is that of tests/training/test_distributed.py; here it also checks that the masks built on
each process's own packed rows, and the wrapped class, change nothing in it.
"""

import json
from pathlib import Path

import pytest

from conftest import QUICKSTART, TINY
from rm.config import load_config
from rm.training.run import main

COHERE2 = [
    "model.random_init.model_type=cohere2",
    "model.random_init.num_hidden_layers=2",
    "model.random_init.config={sliding_window: 16, layer_types: [sliding_attention, full_attention]}",
]
COMMON = TINY + COHERE2 + ["train.log_steps=1", "train.report_to=[]", "export.enabled=false", "train.num_threads=1"]
COMMON += ["train.save_steps=0", "train.eval_steps=0", "train.max_steps=8", "collator.layout=auto"]


def losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "train_log.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_processes_match_one_with_a_wrapped_windowed_model(launched, tmp_path):
    two = launched(2).run("wrapped")  # `rm train` at batch 4 on 2 processes (tests/launched/scenarios.py)
    log = launched(2).output("wrapped")
    assert "Cohere2ForSequenceClassification" in log
    assert "layout: shared (the model reproduces separate forwards" in log, log[-3000:]

    one = tmp_path / "one"
    reference = main(load_config(QUICKSTART, COMMON + ["train.batch_size=8", f"output_dir={one}"]))
    result = json.loads((two / "eval.json").read_text())
    assert result["overall"]["n"] == reference["overall"]["n"] == 61
    assert result["overall"]["mean_margin"] == pytest.approx(reference["overall"]["mean_margin"], abs=1e-5)
    got, want = losses(two), losses(one)
    assert len(got) == len(want) == 8
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= 1e-5
