"""`RM_PLUGINS`: the modules it names are imported before a command runs, so a label, loss term or metric of a
user's own reaches `python -m rm train` (and every process `accelerate launch` starts); a module that is not there
is one line."""

import json
import os
import subprocess
import sys

import pytest

from conftest import QUICKSTART, REPO, SHORT
from rm.cli import main as cli


def test_a_plugin_that_is_not_there_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("RM_PLUGINS", "no_such_plugin_module")
    assert cli(["train", str(QUICKSTART), "train.max_steps=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: RM_PLUGINS: no module 'no_such_plugin_module' to import (is its folder on PYTHONPATH?)"]


@pytest.mark.slow
def test_python_m_rm_train_reports_a_plugins_metric(tmp_path):
    """tests/training/response_length.py registers its label and metric on import: `RM_PLUGINS=response_length`
    gives `python -m rm train`'s eval.json its block, the label gathered from every eval response."""
    env = os.environ | {"RM_PLUGINS": "response_length", "PYTHONPATH": str(REPO / "tests" / "training")}
    command = [sys.executable, "-m", "rm", "train", str(QUICKSTART), *SHORT, f"output_dir={tmp_path / 'run'}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert result["length_correlation"]["responses"] == 2 * result["overall"]["n"] > 0
