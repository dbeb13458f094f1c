"""`rm eval --suite` under `accelerate launch` with two gloo CPU processes: every response scored exactly once,
the same rewards and numbers as one process (the `suite` scenario of the session's shared 2-process launch,
tests/launched/: configs/accelerate/cpu-ddp.yaml with ACCELERATE_USE_CPU=1, since --cpu starts only one
process)."""

import json

import numpy as np
import pytest
from suite_helpers import score


@pytest.mark.slow
def test_two_processes_give_one_processs_suite(launched):
    out = launched(2).run("suite")  # `rm eval --suite rewardbench2 --batch-size 3 --bootstrap-samples 10`
    saved = json.loads((out / "eval.json").read_text())
    assert saved["eval"]["processes"] == 2 and "rewardbench2: score" in launched(2).stdout("suite")
    one = score(launched(2).inputs["exported_tiny"], "rewardbench2", batch_size=3)  # the export the launch scored
    rows = [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]
    assert len(rows) == len(one.rewards) == 16
    two = np.concatenate([r["rewards"] for r in rows])
    assert np.abs(two - np.concatenate(one.rewards)).max() < 1e-5
    assert saved["suite"]["sections"] == pytest.approx(one.result["suite"]["sections"], abs=1e-5)
    assert saved["overall"]["n"] == one.result["overall"]["n"]
