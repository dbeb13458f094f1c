"""FSDP2 on the CPU: two processes over gloo (configs/accelerate/cpu-fsdp.yaml) train, checkpoint in
shards, resume and export the same weights as DDP.

accelerate 1.x sets FSDP up only on GPU-like devices (on the CPU it would quietly run DDP under an FSDP
launcher config); rm/training/accelerator.py puts the FSDP plugin in place itself, and torch's
`fully_shard` runs over gloo. The runs see the same batches as the DDP run (same ranks, same
PairBatches); FSDP reduce-scatters the gradients where DDP all-reduces them, so the weights agree to
float rounding (measured: 3e-8 after 12 steps). 1e-4 is far below a mistake: a single process at
half the global batch differs from the DDP run by 2.5e-2 after 12 steps.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import QUICKSTART, REPO, TINY
from rm.config import RunConfig
from rm.errors import TrainingError
from rm.training.accelerator import make_accelerator

COMMON = TINY + ["train.max_steps=20", "train.save_steps=10", "train.eval_steps=0", "train.batch_size=4"]
COMMON += ["train.log_steps=1", "train.report_to=[]", "train.num_threads=1"]
ENV = os.environ | {"CUDA_VISIBLE_DEVICES": ""}  # stay on the CPU on a GPU machine too


def launch(launcher: str, out: Path, *extra: str) -> str:
    accelerate = str(Path(sys.executable).parent / "accelerate")
    cmd = [accelerate, "launch", "--config_file", f"configs/accelerate/{launcher}", "-m", "rm", "train"]
    cmd += [str(QUICKSTART), *COMMON, f"output_dir={out}", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=ENV)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


def losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "train_log.jsonl").read_text().splitlines()]


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow
def test_fsdp_on_cpu_checkpoints_resumes_and_exports_the_ddp_weights(tmp_path):
    ddp, fsdp = tmp_path / "ddp", tmp_path / "fsdp"
    launch("cpu-ddp.yaml", ddp, "train.save_steps=0")
    reference = load_file(ddp / "export" / "model.safetensors")

    launch("cpu-fsdp.yaml", fsdp)
    middle = fsdp / "checkpoints" / "step-10"
    for part in ("pytorch_model_fsdp_0", "optimizer_0"):  # one shard per process: it was sharded
        assert {p.name for p in (middle / part).glob("*.distcp")} == {"__0_0.distcp", "__1_0.distcp"}
    assert not (middle / "model.safetensors").exists()
    straight = load_file(fsdp / "export" / "model.safetensors")
    log = losses(fsdp)

    # Resume from the middle: the last 10 steps again, from the shards, then the export again.
    out = launch("cpu-fsdp.yaml", fsdp, f"train.resume={middle}")
    assert f"resumed from {middle}: step 10" in out
    train = json.loads((fsdp / "eval.json").read_text())["train"]
    assert train["resumed_from"] == str(middle) and train["steps"] == 20 and train["processes"] == 2
    resumed = load_file(fsdp / "export" / "model.safetensors")
    assert losses(fsdp) == pytest.approx(log, abs=1e-6) and len(log) == 20  # the same 20 logged steps

    diffs = max_difference(straight, reference), max_difference(resumed, reference)
    print(f"FSDP vs DDP after 20 steps: {diffs[0]:.2g}; resumed from step 10 vs DDP: {diffs[1]:.2g}")
    assert max(diffs) <= 1e-4


def test_deepspeed_on_the_cpu_is_refused_before_anything_starts(monkeypatch):
    """accelerate would set up plain DDP under a DeepSpeed launcher config on the CPU, without a word."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setattr("torch.accelerator.is_available", lambda: False)
    with pytest.raises(TrainingError, match="DeepSpeed runs on GPUs only"):
        make_accelerator(RunConfig())
