"""torch's CPU threads (rm/model/threads.py): by default the cores this process may use, shared by the run's
processes on the node, in every command; `train.num_threads` and `--num-threads` override it."""

import os

import pytest
import torch

import rm.model.threads as threads
from conftest import QUICKSTART
from rm.cli import main as cli
from rm.config import load_config


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_default_shares_the_usable_cores_among_the_local_processes(monkeypatch, tmp_path):
    from rm.model import threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(threads, "QUOTA_FILES", ())
    assert threads.default_threads({}) == 8
    assert threads.default_threads({"LOCAL_WORLD_SIZE": "2"}) == 4
    assert threads.default_threads({"LOCAL_WORLD_SIZE": "16"}) == 1  # never none
    (tmp_path / "cpu.max").write_text("250000 100000\n")  # a quota of 2.5 cores: 3
    monkeypatch.setattr(threads, "QUOTA_FILES", ((tmp_path / "cpu.max", None),))
    assert threads.default_threads({}) == 3 and threads.default_threads({"LOCAL_WORLD_SIZE": "2"}) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.default_threads({}) == 8


@pytest.mark.slow
def test_score_and_eval_use_the_default_or_num_threads(
    exported_tiny, synthetic_root, tmp_path, monkeypatch, restore_threads
):
    """Before, `rm eval` and `rm score` kept torch's own count (every core of the machine) and had no option."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)  # one usable core
    (tmp_path / "in.jsonl").write_text('{"text": "\\n\\nHuman: hi\\n\\nAssistant: hello"}\n')
    torch.set_num_threads(2)
    assert cli(["score", "--model", str(exported_tiny), "--input", str(tmp_path / "in.jsonl")]) == 0
    assert torch.get_num_threads() == 1
    args = ["eval", "--model", str(exported_tiny), "--data", str(synthetic_root), "--out", str(tmp_path / "e")]
    assert cli([*args, "--num-threads", "2", "--bootstrap-samples", "20"]) == 0
    assert torch.get_num_threads() == 2


def test_a_busy_machine_is_said_and_the_default_left_alone(monkeypatch, caplog, restore_threads, tmp_path):
    """The default does not follow the load (that would change a run's numbers); `rm train` names a crowded one."""
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    assert threads.busy_note(2, load=0.3) == ""  # quiet
    assert threads.busy_note(1, load=3.0) == ""  # one thread cannot wait on another
    note = threads.busy_note(2, load=1.8)
    assert "load average 1.8" in note and "train.num_threads=1" in note and "--num-threads 1" in note
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.8, 1.0, 1.0))
    monkeypatch.setattr(threads, "default_threads", lambda: 2)
    assert threads.set_threads(0) == 2 and torch.get_num_threads() == 2  # the default, crowded or not
    from rm.training import run

    for extra, said in ((["train.num_threads=0"], True), (["train.num_threads=1"], False)):  # asked for 1: no word
        caplog.clear()
        cfg = load_config(QUICKSTART, [f"output_dir={tmp_path / 'run'}", *extra])
        with caplog.at_level("INFO", logger="rm"):
            run.start(cfg, run.make_accelerator(cfg))
        assert (note in [r.getMessage() for r in caplog.records]) is said
