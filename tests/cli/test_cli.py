"""The command line: one-line errors instead of tracebacks, overrides anywhere, help with examples."""

import pytest

from conftest import REPO
from rm.cli import main as cli

SWEEP = REPO / "configs" / "sweeps" / "quickstart-lr.yaml"


def test_overrides_may_follow_flags(tmp_path, capsys):
    assert cli(["sweep", str(SWEEP), "--dry-run", "n_trials=1", f"sweep_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert out.count("python -m rm train") == 1 and str(tmp_path) in out
    assert cli(["sweep", str(SWEEP), "n_trials=1", "--dry-run", f"sweep_dir={tmp_path}"]) == 0
    assert capsys.readouterr().out == out
    with pytest.raises(SystemExit):
        cli(["sweep", str(SWEEP), "--dry-run", "--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_the_sweep_masks_a_password_in_the_storage_url(capsys):
    url = "postgresql://rm:s3cret-pw@db.example:5432/sweeps"
    assert cli(["sweep", str(SWEEP), "--dry-run", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "s3cret-pw" not in out and "postgresql://rm:***@db.example:5432/sweeps" in out
