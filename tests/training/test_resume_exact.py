"""A run stopped and resumed ends exactly where the uninterrupted run does, with dropout too, and a resume that
would re-train pairs already seen (another train.batch_size inside an epoch) is refused in one line."""

import os
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import QUICKSTART, REPO, SIX_STEPS
from rm.config import load_config
from rm.config.rundir import WEIGHTS
from rm.errors import ConfigError
from rm.training.run import main

# 96 pairs / 8 = 12 micro-batches an epoch: a stop after step 4 is inside the first epoch.
RUN = [*SIX_STEPS, "train.save_steps=0"]
DROPOUT = {
    "attention dropout": ["model.random_init.config={attention_dropout: 0.3}"],
    "LoRA dropout": ["model.lora.r=4", "model.lora.dropout=0.3"],
}


def ctrl_c_after(batches: int):
    """An on_batch hook: Ctrl-C after micro-batch `batches`, seen at the end of the next step."""
    count = [0]

    def on_batch(batch, loss):
        count[0] += 1
        if count[0] == batches:
            os.kill(os.getpid(), signal.SIGINT)

    return on_batch


def last_checkpoint(out) -> dict:
    return load_file(max((out / "checkpoints").glob("step-*"), key=lambda p: int(p.name[5:])) / WEIGHTS)


@pytest.mark.parametrize("dropout", DROPOUT)
@pytest.mark.slow
def test_a_stopped_run_with_dropout_resumes_exactly(tmp_path, dropout):
    """The RNG restored from the checkpoint must drive the same dropout masks as in the uninterrupted run: making the
    DataLoader's iterator used to draw from it first (8.2e-3 apart at dropout 0.3; 0 without dropout)."""
    run = RUN + DROPOUT[dropout] + ["train.save_steps=6"]  # both runs end with a step-6 checkpoint
    main(load_config(QUICKSTART, run + [f"output_dir={tmp_path / 'whole'}"]))
    stopped = load_config(QUICKSTART, run + [f"output_dir={tmp_path / 'stopped'}"])
    assert main(stopped, on_batch=ctrl_c_after(3))["train"]["steps"] == 4
    main(load_config(QUICKSTART, run + [f"output_dir={tmp_path / 'stopped'}", "train.resume=auto"]))
    whole, resumed = last_checkpoint(tmp_path / "whole"), last_checkpoint(tmp_path / "stopped")
    diff = max((whole[k] - resumed[k]).abs().max().item() for k in whole)
    assert diff == 0, f"{dropout}: resumed run {diff:.3g} from the uninterrupted one"
    assert any(not torch.equal(v, torch.zeros_like(v)) for v in whole.values())


@pytest.mark.slow
def test_another_batch_size_inside_an_epoch_is_refused_in_one_line(tmp_path):
    """64 -> 32 at step 20 made steps 21-40 all pairs already seen, with only a warning."""
    out = tmp_path / "run"
    assert main(load_config(QUICKSTART, RUN + [f"output_dir={out}"]), on_batch=ctrl_c_after(2))["train"]["steps"] == 3
    before = {name: (out / name).read_bytes() for name in ("config.yaml", "rm_run.json")}
    with pytest.raises(ConfigError) as err:
        main(load_config(QUICKSTART, RUN + [f"output_dir={out}", "train.resume=auto", "train.batch_size=4"]))
    message = str(err.value)
    assert "\n" not in message and "stopped inside an epoch planned with train.batch_size=8 (now 4)" in message
    # Refused before the run directory is claimed again: its config.yaml still resumes it as it was.
    assert {name: (out / name).read_bytes() for name in before} == before
    assert main(load_config(out / "config.yaml", ["train.resume=auto"]))["train"]["steps"] == 6


# Each process stops itself with Ctrl-C after its 3rd micro-batch (rank 0 only: the stop is agreed at the step
# boundary, tests/training/test_faults.py); run as `python -m rm train` runs, under torchrun.
STOPPER = """import os, signal, sys
from rm.config import load_config
from rm.training.run import main
count = [0]
def on_batch(batch, loss):
    count[0] += 1
    if count[0] == 3 and os.environ.get("RANK") == "0":
        os.kill(os.getpid(), signal.SIGINT)
main(load_config(sys.argv[1], sys.argv[2:]), on_batch=on_batch if "stop" in os.environ else None)
"""


@pytest.mark.slow
def test_two_processes_with_dropout_stopped_and_resumed_end_as_the_uninterrupted_run(tmp_path):
    """Item 7 under 2 processes (gloo, CPU): each process restores its own RNG states before its dropout masks.
    Measured: max weight diff 0 (gloo sums the two gradients in the same order in both runs)."""
    script = tmp_path / "stopper.py"
    script.write_text(STOPPER)
    run = [*RUN, *DROPOUT["attention dropout"], "train.save_steps=6", "train.batch_size=4"]

    def torchrun(out, *extra, stop=False):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
        env = os.environ | {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"} | ({"stop": "1"} if stop else {})
        cmd += [str(QUICKSTART), *run, f"output_dir={out}", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)

    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert torchrun(whole).returncode == 0
    proc = torchrun(stopped, stop=True)
    assert proc.returncode == 0 and "SIGINT: stopped after step" in proc.stderr, proc.stderr[-2000:]
    assert not (stopped / "eval.json").exists()
    [checkpoint] = (stopped / "checkpoints").glob("step-*")
    assert 2 <= int(checkpoint.name[5:]) < 6  # stopped inside the run (6 steps)
    proc = torchrun(stopped, "train.resume=auto")
    assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = last_checkpoint(whole), last_checkpoint(stopped)
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    print(f"2 processes, dropout 0.3, stopped at {checkpoint.name}: max weight diff vs uninterrupted {diff:.2g}")
    assert diff == 0
