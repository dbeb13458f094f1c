"""Two and three CPU processes under `accelerate launch`: every eval pair is gathered exactly once, also when
the eval set (61 pairs) divides evenly neither into batches nor across the processes.

`accelerate launch --cpu --num_processes 2` starts ONE process (accelerate 1.x only fans out on CPU
through mpirun), so the session's shared launches (tests/launched/: the `eval_train` and `eval_rewards`
scenarios) use configs/accelerate/cpu-ddp.yaml (torchrun) with ACCELERATE_USE_CPU=1, which gives gloo
processes; the tests check that two and three processes really ran.
"""

import json

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rm.config import DataConfig
from rm.data.load import load_pairs, subset_counts
from rm.evaluation.eval_report import EvalOptions
from rm.evaluation.eval_report import evaluate_model as eval_main


@pytest.mark.slow
def test_two_processes_count_every_eval_pair_once(launched, tmp_path):
    # eval_batch_size 16: batches of 16, 16, 16, 13 -> two per process (rm/collate/shard.py's EvalBatches).
    out = launched(2).run("eval_train")  # `rm train` TINY, 4 steps, evals at 2 and 4, on 2 processes
    held = load_pairs(str(out / "data"), "test", [])
    saved = json.loads((out / "eval.json").read_text())
    assert saved["train"]["processes"] == 2
    assert saved["overall"]["n"] == len(held) == 61
    assert {name: m["n"] for name, m in saved["subsets"].items()} == subset_counts(held)

    # Per-subset accuracy and ECE reach the tracker at every eval (step 2, and the final one at 4).
    events = EventAccumulator(str(next(out.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for name in subset_counts(held):
        for metric in ("accuracy", "ece"):
            assert [e.step for e in events.Scalars(f"eval/{metric}/{name}")] == [2, 4], (metric, name)
    assert {"eval/accuracy", "eval/ece"} <= tags
    assert events.Scalars("eval/ece")[-1].value == pytest.approx(saved["overall"]["ece"], rel=1e-5)

    # `rm eval` on the export: two and three processes gather the same rewards, in the same order, as one.
    # Batches of 8: 7 full ones and one of 5, the one-process plan dealt out (EvalBatches): 4 each on two
    # processes; on three, rounds of 3, 3 and 2 batches, so one process scores a pair again in the last round.
    eval_main(str(out / "export"), DataConfig(source=str(out / "data")), tmp_path / "one", EvalOptions(batch_size=8))
    rows = {"one": [json.loads(line) for line in (tmp_path / "one" / "rewards.jsonl").read_text().splitlines()]}
    for processes, name in ((2, "two"), (3, "three")):
        scored = launched(processes).run("eval_rewards")  # `rm eval` of out/export, --batch-size 8
        rows[name] = [json.loads(line) for line in (scored / "rewards.jsonl").read_text().splitlines()]
        assert [r["origin"] for r in rows[name]] == [r["origin"] for r in rows["one"]] == [p.origin for p in held]
        for key in ("chosen_reward", "rejected_reward"):
            assert np.allclose([r[key] for r in rows[name]], [r[key] for r in rows["one"]], atol=1e-5)
        many = json.loads((scored / "eval.json").read_text())
        assert many["eval"]["processes"] == processes and many["overall"]["n"] == 61
        assert many["overall"]["accuracy"] == pytest.approx(saved["overall"]["accuracy"])
