"""An unreachable Hub ends in one line per command that names the model or dataset and what to do,
at once (rm/data/hub_reach.py), instead of huggingface_hub's minute of retries and 45 warning lines."""

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = """
import sys
from rm.cli import main
sys.exit(main(["data", "inspect", "nobody/no-such-data"]) * 10 + main(["score", "--model", "nobody/no-such-model",
         "--input", "x.jsonl"]))
"""


def closed_port() -> int:
    """A localhost port nothing listens on: connecting to it is refused at once, no network needed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_unreachable_hub_fails_at_once_in_one_line_each(tmp_path):
    # huggingface_hub reads HF_HUB_OFFLINE and HF_ENDPOINT when imported: a child process with its own env,
    # offline mode off for it alone, and an empty cache so that nothing can be found locally.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env |= {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "HF_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 22, done.stderr
    assert len(lines) == 2, done.stderr  # no retry warnings before them
    data, model = lines
    assert data.startswith("error: nobody/no-such-data: ") and "cannot be reached" in data
    assert model.startswith("error: nobody/no-such-model: ") and "cannot be reached" in model
    assert all("HF_HUB_OFFLINE=1" in line and "local path" in line for line in lines)
