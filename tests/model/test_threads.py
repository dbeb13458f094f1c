"""torch's CPU threads (rm/model/threads.py): by default the cores this process may use, shared by the run's
processes on the node, in every command; `train.num_threads` and `--num-threads` override it."""

import os

import pytest
import torch

from rm.cli import main as cli


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
