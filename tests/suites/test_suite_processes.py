"""`rm eval --suite` under `accelerate launch` with two gloo CPU processes: every response scored exactly once,
the same rewards and numbers as one process (the launch as tests/evaluation/test_eval_multiprocess.py does it:
--multi_gpu with ACCELERATE_USE_CPU=1, since --cpu starts only one process)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from suite_helpers import SOURCES, score

from conftest import REPO

ACCELERATE = str(Path(sys.executable).parent / "accelerate")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_give_one_processs_suite(exported_tiny, tmp_path):
    cmd = [ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision",
           "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()), "-m", "rm", "eval", "--model",
           str(exported_tiny), "--suite", "rewardbench2", "--data", str(SOURCES["rewardbench2"]), "--out",
           str(tmp_path), "--batch-size", "3", "--bootstrap-samples", "10"]  # fmt: skip
    env = os.environ | {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["eval"]["processes"] == 2 and "rewardbench2: score" in proc.stdout
    one = score(exported_tiny, "rewardbench2", batch_size=3)
    rows = [json.loads(line) for line in (tmp_path / "rewards.jsonl").read_text().splitlines()]
    assert len(rows) == len(one.rewards) == 16
    two = np.concatenate([r["rewards"] for r in rows])
    assert np.abs(two - np.concatenate(one.rewards)).max() < 1e-5
    assert saved["suite"]["sections"] == pytest.approx(one.result["suite"]["sections"], abs=1e-5)
    assert saved["overall"]["n"] == one.result["overall"]["n"]
