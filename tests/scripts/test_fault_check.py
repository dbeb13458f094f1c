"""scripts/fault_check.py runs its checks as a user would; one fast item here (the rest take minutes)."""

import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.slow
def test_item_1_an_overwrite_over_the_users_own_project_is_refused():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "fault_check.py"), "1"], capture_output=True,
                          text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("item 1: ok — ") and "which no rm run claimed" in proc.stdout
