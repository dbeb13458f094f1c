"""One run at a time in a run directory: a second process stops at once naming the holder and
changes nothing; a lock left by a dead process is taken over; the lock leaves no file behind."""

import hashlib
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import QUICKSTART
from conftest import SHORT as SHORT_RUN
from rm.cli import main as cli
from rm.training.run_lock import LOCK, Locked, RunLock

SHORT = [*SHORT_RUN, "train.save_total_limit=1", "export.enabled=false"]


def checksums(folder) -> dict[str, str]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("locked") / "run"
    assert cli(["train", str(QUICKSTART), *SHORT, f"output_dir={out}"]) == 0
    assert not (out / LOCK).exists()  # a clean exit leaves no lock behind
    return out


@pytest.mark.parametrize("how", ["train.resume=auto", "train.overwrite=true"])
def test_a_second_process_stops_at_once_and_changes_nothing(finished, capsys, how):
    """The holder here is this test (another open file description: flock conflicts as between processes).
    Neither a resume (which pruned the first run's checkpoints) nor an overwrite (which truncated its log) of
    a run directory in use touches a file, not even another process's `.partial-*` folder that prune removes."""
    partial = finished / "checkpoints" / ".partial-step-3"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"being written")
    holder = RunLock(finished).acquire()
    try:
        before = checksums(finished)
        capsys.readouterr()
        assert cli(["train", str(finished / "config.yaml"), how]) == 2
        err = capsys.readouterr().err
        assert f"is in use by process {os.getpid()} on {socket.gethostname()}" in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert checksums(finished) == before
    finally:
        holder.release()
        partial.joinpath("model.safetensors").unlink()
        partial.rmdir()
    assert not (finished / LOCK).exists()  # the holder's release removed it; the refused start left none


def test_a_lock_of_a_dead_process_is_taken_over(tmp_path):
    """A run killed -9 leaves its lock file; its flock went with it, so the next run starts, and removes it."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    assert cli(["train", str(QUICKSTART), *SHORT, f"output_dir={out}"]) == 0
    assert not (out / LOCK).exists() and (out / "eval.json").is_file()


def test_a_lock_of_another_host_is_refused_naming_it(tmp_path):
    """On a shared file system rm cannot see whether another host's process lives: it says which to check."""
    (tmp_path / LOCK).write_text(json.dumps({"pid": 4242, "host": "node-elsewhere-7"}))
    with pytest.raises(Locked, match=r"process 4242 on node-elsewhere-7 .*if that process is gone, delete"):
        RunLock(tmp_path).acquire()
    assert (tmp_path / LOCK).is_file()  # not ours to remove


def test_a_refused_start_leaves_no_folder_it_made(tmp_path):
    """The lock makes output_dir; a run refused after it (or one that fails) takes the folders back."""
    out = tmp_path / "a" / "b"
    lock = RunLock(out).acquire()
    assert (out / LOCK).is_file()
    with pytest.raises(Locked):
        RunLock(out).acquire()
    lock.release()
    assert not (tmp_path / "a").exists()
