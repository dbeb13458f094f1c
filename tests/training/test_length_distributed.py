"""A length head (model.head.length) on N processes ends with the weights, and the running statistics of its
correlation term, of one process accumulating N micro-batches: the term adds up over micro-batches and processes
(rm/model/length/length_loss.py), under token budgets that make micro-batches length-grouped."""

import json

import pytest
from safetensors.torch import load_file
from test_distributed import BUDGETS

from conftest import QUICKSTART
from rm.config import load_config
from rm.training.run import main

STEPS = 8
LENGTH_RUN = [
    *BUDGETS, "model.head.length=true", f"train.max_steps={STEPS}", f"train.save_steps={STEPS}",
    "export.enabled=false",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_a_length_head_on_n_processes_matches_one_process_accumulating_n(launched, processes, tmp_path):
    run = launched(processes).run("length_head")
    one = tmp_path / "one"
    main(load_config(QUICKSTART, [*LENGTH_RUN, f"train.grad_accum={processes}", f"output_dir={one}"]))
    got, want = (load_file(r / "checkpoints" / f"step-{STEPS}" / "model.safetensors") for r in (run, one))
    assert got.keys() == want.keys() and any(k.endswith("length_head.moments") for k in got)
    diff = max((got[k].double() - want[k].double()).abs().max().item() for k in got)
    print(f"length head, {processes} processes vs 1 process x grad_accum {processes}: max weight diff {diff:.2g}")
    assert diff <= 1e-5
    moments = next(k for k in got if k.endswith("length_head.moments"))
    assert got[moments].abs().sum() > 0  # the statistics were updated, alike
    for r in (run, one):  # both measured the held-out correlations
        assert json.loads((r / "eval.json").read_text())["length_head"]["responses"] == 122
