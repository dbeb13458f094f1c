"""Two machines x one process, as two `accelerate launch` commands on this machine, against one machine x two.

configs/accelerate/two-machines-cpu.yaml is launched twice, as a user launches it on two machines:
machine_rank 0 and 1, main_process_ip 127.0.0.1, a free port. Both launches share the output directory,
as two machines share a network filesystem (the run's data, tokenizer and checkpoints are written once
by rank 0 and read by every rank). The same run on one machine (configs/accelerate/cpu-ddp.yaml, two
processes) gives the same ranks, the same batches and the same gloo all-reduce, so the exported
weights agree to float rounding; 1e-5 is far below what a mistake gives (two single-process runs
instead of one 2-process run, each at half the global batch, differ from it by up to 2.5e-2 after 12 steps).
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import QUICKSTART, REPO, TINY

COMMON = TINY + ["train.log_steps=1", "train.report_to=[]", "train.num_threads=1", "train.batch_size=4"]
COMMON += ["train.save_steps=0", "train.eval_steps=0"]
ACCELERATE = str(Path(sys.executable).parent / "accelerate")
ENV = os.environ | {"CUDA_VISIBLE_DEVICES": ""}  # stay on the CPU on a GPU machine too


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "export" / "model.safetensors")


@pytest.mark.slow
def test_two_machines_of_one_process_match_one_machine_of_two(tmp_path):
    two_machines = tmp_path / "two-machines"
    port = free_port()
    base = [ACCELERATE, "launch", "--config_file", "configs/accelerate/two-machines-cpu.yaml"]
    base += ["--main_process_port", str(port)]
    run = ["-m", "rm", "train", str(QUICKSTART), *COMMON, f"output_dir={two_machines}"]
    launches = [
        subprocess.Popen(
            base + rank + run, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for rank in ([], ["--machine_rank", "1"])
    ]
    outputs = [p.communicate(timeout=240)[0] for p in launches]
    for p, out in zip(launches, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]
    # Rank 0 (machine 0) alone prints the summary; each launch started one process of the two.
    assert outputs[0].count("held-out accuracy after 12 steps") == 1
    assert "held-out accuracy" not in outputs[1]
    info = json.loads((two_machines / "eval.json").read_text())["train"]
    assert info["processes"] == 2 and info["steps"] == 12

    one_machine = tmp_path / "one-machine"
    cmd = [ACCELERATE, "launch", "--config_file", "configs/accelerate/cpu-ddp.yaml", "-m", "rm", "train"]
    cmd += [str(QUICKSTART), *COMMON, f"output_dir={one_machine}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]

    runs = (two_machines, one_machine)
    got, want = weights(two_machines), weights(one_machine)
    assert got.keys() == want.keys()
    diff = max((got[k] - want[k]).abs().max().item() for k in want)
    print(f"two machines x 1 vs one machine x 2 processes: max weight difference {diff:.2g}")
    assert diff <= 1e-5
    losses = [[json.loads(line)["loss"] for line in (r / "train_log.jsonl").read_text().splitlines()] for r in runs]
    assert losses[0] == pytest.approx(losses[1], abs=1e-5) and len(set(losses[0])) == 12  # and it did train
