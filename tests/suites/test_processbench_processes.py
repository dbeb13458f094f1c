"""`rm eval --suite processbench` under `accelerate launch` with 2 and 3 gloo CPU processes: every item's steps
scored exactly once, the same step probabilities and the same paper F1 as one process (the `processbench` scenario
of the session's shared launches, tests/launched/)."""

import json
from pathlib import Path

import pytest

from rm.cli import main as cli

BENCH = Path(__file__).resolve().parent / "fixtures" / "processbench"


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_n_processes_give_one_processs_processbench(launched, processes, tmp_path):
    out = launched(processes).run("processbench")
    export = launched(processes).inputs["exported_tiny"]
    one = tmp_path / "one"
    argv = ["eval", "--model", export, "--suite", "processbench", "--data", str(BENCH), "--out", str(one)]
    assert cli([*argv, "--batch-size", "2", "--max-length", "512"]) == 0
    saved, want = (json.loads((d / "eval.json").read_text()) for d in (out, one))
    assert saved["eval"]["processes"] == processes
    rows, rows_one = ([json.loads(x) for x in (d / "step_scores.jsonl").read_text().splitlines()] for d in (out, one))
    assert len(rows) == len(rows_one) == 14
    for got, ref in zip(rows, rows_one, strict=True):
        assert got.keys() == ref.keys()
        for key in got:
            assert got[key] == (pytest.approx(ref[key], abs=1e-6) if key == "step_probs" else ref[key])
    assert saved["suite"]["score"] == pytest.approx(want["suite"]["score"], abs=1e-12)
    assert saved["suite"]["sections"] == pytest.approx(want["suite"]["sections"], abs=1e-12)
