"""Two processes of DDP (gloo, CPU) against one process at the same global batch.

Launched as users launch: `accelerate launch --config_file configs/accelerate/cpu-ddp.yaml -m rm train`.
(`accelerate launch --num_processes 2 --cpu` is not used: accelerate 1.x starts a single process for it
unless mpirun is set up, which would make this test compare a run with itself at half the batch.)

The batches are fixed by PairBatches: one seeded permutation of the pairs, cut into micro-batches of
`train.batch_size`, dealt out in turn to the processes. With 2 processes at batch 4, optimizer step k
sees micro-batches 2k and 2k+1 = pairs [8k, 8k + 8) of the permutation, exactly the micro-batch k of
one process at batch 8. DDP averages the two equal-sized half-batch gradients, which is the gradient
of the mean loss over the 8 pairs, so both runs follow the same trajectory up to float rounding.

Tolerance on each logged loss: 1e-5. Rounding differs (packed rows of 4 pairs vs 8 change the matmul
shapes; gloo sums the two half gradients in its own order), about 1e-7 relative per step; measured
max difference over the 12 steps was 6e-8. 1e-5 is well above that, and far below what any mistake
in batch assignment produces: the loss changes by ~1e-2 from step to step, and running the 2-process
command as one process at batch 4 differs by 0.03-0.14.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, TINY
from rm.config import load_config
from rm.training.run import main

QUICKSTART = REPO / "configs" / "quickstart.yaml"
COMMON = TINY + ["train.log_steps=1", "train.report_to=[]", "export.enabled=false", "train.num_threads=1"]
COMMON += ["train.save_steps=0", "train.eval_steps=0"]


def test_two_processes_match_one_at_the_same_global_batch(tmp_path):
    two = tmp_path / "two"
    accelerate = Path(sys.executable).parent / "accelerate"
    cmd = [str(accelerate), "launch", "--config_file", "configs/accelerate/cpu-ddp.yaml", "-m", "rm", "train"]
    cmd += [str(QUICKSTART), *COMMON, "train.batch_size=4", f"output_dir={two}"]
    env = os.environ | {"CUDA_VISIBLE_DEVICES": ""}  # stay on the CPU on a GPU machine too
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("held-out accuracy after 12 steps") == 1  # printed by the main process only

    one = tmp_path / "one"
    reference = main(load_config(QUICKSTART, COMMON + ["train.batch_size=8", f"output_dir={one}"]))

    result = json.loads((two / "eval.json").read_text())
    # Each of the 61 eval pairs counted exactly once: 4 batches of 16/16/16/13 dealt to 2 processes.
    assert result["overall"]["n"] == 61
    assert {k: m["n"] for k, m in result["subsets"].items()} == {k: m["n"] for k, m in reference["subsets"].items()}
    assert result["overall"]["mean_margin"] == pytest.approx(reference["overall"]["mean_margin"], abs=1e-5)
    assert result["overall"]["accuracy"] == reference["overall"]["accuracy"]

    def losses(run: Path) -> list[float]:
        return [json.loads(line)["loss"] for line in (run / "train_log.jsonl").read_text().splitlines()]

    got, want = losses(two), losses(one)
    assert len(got) == len(want) == 12
    diff = max(abs(a - b) for a, b in zip(got, want, strict=True))
    print(f"2 processes x batch 4 vs 1 process x batch 8: max loss difference over 12 steps {diff:.2g}")
    assert diff <= 1e-5
