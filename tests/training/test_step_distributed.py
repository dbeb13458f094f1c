"""A process reward model on N processes (gloo, CPU) ends with the weights and the eval.json `steps` block of one
process accumulating N micro-batches: each group weighs its steps in its optimizer step (rm/model/steps/
step_loss.py), under token budgets that make micro-batches of different sizes, and eval gathers every step once
(rm/evaluation/steps/step_gather.py)."""

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import QUICKSTART, TINY_MODEL
from rm.config import load_config
from rm.data.steps.step_problems import write_step_dataset
from rm.training.run import main

STEPS = 6


def step_run(folder: Path) -> list[str]:
    """The run's overrides, its data written under `folder` (the same bytes for every process and run)."""
    data = write_step_dataset(folder / "step-data", n_train=40, n_test=13, seed=5, k=3)["train"].parent.parent
    return [
        f"data.source={data}", *TINY_MODEL, "model.random_init.max_position_embeddings=256",
        "collator.max_length=256", "collator.max_tokens=700", "collator.eval_max_tokens=500",
        f"train.max_steps={STEPS}", f"train.save_steps={STEPS}", "train.eval_steps=0", "export.enabled=false",
        "data.cache=false",
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_steps_on_n_processes_match_one_process_accumulating_n(launched, processes, tmp_path):
    run = launched(processes).run("steps")
    one = tmp_path / "one"
    main(load_config(QUICKSTART, [*step_run(tmp_path), f"train.grad_accum={processes}", f"output_dir={one}"]))
    got, want = (load_file(r / "checkpoints" / f"step-{STEPS}" / "model.safetensors") for r in (run, one))
    assert got.keys() == want.keys()
    diff = max((got[k].double() - want[k].double()).abs().max().item() for k in got)
    print(f"steps, {processes} processes vs 1 process x grad_accum {processes}: max weight diff {diff:.2g}")
    assert diff <= 1e-5
    blocks = [json.loads((r / "eval.json").read_text())["steps"] for r in (run, one)]
    assert blocks[0]["overall"]["n_steps"] == blocks[1]["overall"]["n_steps"] > 0
    assert blocks[0]["overall"]["n_solutions"] == 39
    assert json.dumps(blocks[0], sort_keys=True) == json.dumps(blocks[1], sort_keys=True) or _close(*blocks)


def _close(a, b) -> bool:
    """Equal to 1e-6 where numbers, exactly elsewhere."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, abs=1e-6)
    return a == b
