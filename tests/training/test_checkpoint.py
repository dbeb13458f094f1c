"""Surviving interruption: a run killed (SIGKILL) or pre-empted (SIGTERM) and resumed with
train.resume=auto ends with the weights and the log of a run that was never interrupted.

The interrupted runs are child processes forked from the test process, running rm's CLI as
`python -m rm train` does: a fresh interpreter would spend most of the test importing torch.
"""

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import REPO, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config
from rm.config.rundir import MANIFEST, MARKER, STATE, RunDir
from rm.errors import ConfigError
from rm.training.checkpoint import prune
from rm.training.run import main

QUICKSTART = REPO / "configs" / "quickstart.yaml"
# 96 pairs / 8 = 12 micro-batches an epoch; 36 steps = 3 epochs, so resuming crosses epoch boundaries.
RUN = [
    "data.synthetic.n_train=96",
    "data.synthetic.n_eval=24",
    *TINY_MODEL,
    "train.batch_size=8",
    "train.eval_batch_size=24",
    "train.max_steps=36",
    "train.save_steps=4",
    "train.save_total_limit=2",
    "train.log_steps=5",
    "train.eval_steps=10",
    "train.lr=3e-3",
    "train.report_to=[]",
    "train.num_threads=1",  # the same kernels in the killed, resumed and reference processes
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its final weights and its log."""
    out = tmp_path_factory.mktemp("reference")
    main(load_config(QUICKSTART, RUN + [f"output_dir={out}"]))
    return load_file(out / "export" / "model.safetensors"), (out / "train_log.jsonl").read_text().splitlines()


def start(out: Path) -> int:
    """Fork a process that runs `python -m rm train` with RUN, its output in OUT.log; return its pid."""
    out.parent.mkdir(parents=True, exist_ok=True)
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child never returns into pytest
        sys.stdout = sys.stderr = open(f"{out}.log", "w", buffering=1)  # noqa: SIM115
        os.dup2(sys.stdout.fileno(), 1), os.dup2(sys.stdout.fileno(), 2)
        code = cli(["train", str(QUICKSTART), *RUN, f"output_dir={out}"])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(code)


def exit_code(pid: int) -> int | None:
    """The child's exit code (-N when killed by signal N), or None while it runs."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if done else None


def wait_for(path: Path, pid: int, timeout: float = 300) -> None:
    """Until `path` exists; the run must not end first. The deadline guards a hang only (a tiny run's checkpoint
    comes within seconds unloaded)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        code = exit_code(pid)
        assert code is None, f"the run ended ({code}) before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.005)


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def same_log(resumed: list[str], reference: list[str]) -> bool:
    got, want = [json.loads(r) for r in resumed], [json.loads(r) for r in reference]
    return [r["step"] for r in got] == [r["step"] for r in want] and all(
        abs(g["loss"] - w["loss"]) <= 1e-6 and g["lr"] == w["lr"] for g, w in zip(got, want, strict=True)
    )


@pytest.mark.slow
def test_sigkill_after_a_checkpoint_then_resume_matches_the_uninterrupted_run(reference, tmp_path):
    out = tmp_path / "killed"
    pid = start(out)
    wait_for(out / "checkpoints" / "step-8" / STATE, pid)
    os.kill(pid, signal.SIGKILL)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGKILL
    assert not (out / "eval.json").exists()  # it really was cut short
    killed_at = RunDir(out).complete_checkpoints()[-1][0]
    assert 8 <= killed_at < 36
    # Debris resume must ignore: a save cut short, and a step folder without its trainer state.
    (out / "checkpoints" / ".partial-step-99").mkdir()
    (out / "checkpoints" / ".partial-step-99" / "model.safetensors").write_bytes(b"half")
    (out / "checkpoints" / "step-98").mkdir()

    result = main(load_config(QUICKSTART, RUN + [f"output_dir={out}", "train.resume=auto"]))

    assert result["train"]["resumed_from"] == str(out / "checkpoints" / f"step-{killed_at}")
    assert result["train"]["steps"] == 36 and result["train"]["epochs"] == 3.0
    weights, log = reference
    diff = max_diff(load_file(out / "export" / "model.safetensors"), weights)
    print(f"SIGKILL at step {killed_at}, resumed: max abs weight diff vs uninterrupted {diff:.3g}")
    assert diff <= 1e-6
    assert same_log((out / "train_log.jsonl").read_text().splitlines(), log)
    # The newest save_total_limit=2 complete checkpoints are kept, each with the resolved config.
    assert [s for s, _ in RunDir(out).complete_checkpoints()] == [32, 36]
    assert not list((out / "checkpoints").glob(".partial-*"))
    # train.resume is a command to this invocation, not a property of the run: not saved
    assert load_config(out / "checkpoints" / "step-36" / "config.yaml").train.resume == ""


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_143(reference, tmp_path):
    """Saved, no traceback, and exit status 128 + SIGTERM: `rm train … && rm export …` stops there, and a job
    scheduler does not mark the job completed."""
    out = tmp_path / "preempted"
    pid = start(out)
    wait_for(out / "checkpoints" / "step-4" / STATE, pid)
    os.kill(pid, signal.SIGTERM)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    output = Path(f"{out}.log").read_text()
    assert code == 128 + signal.SIGTERM, output[-2000:]
    assert "Traceback" not in output
    line = next(line for line in output.splitlines() if line.startswith("stopped by SIGTERM after step"))
    step = int(line.split("after step ")[1].split()[0])
    assert 4 <= step < 36
    assert (out / "checkpoints" / f"step-{step}" / STATE).is_file()  # saved at the step it stopped
    assert json.loads((out / "checkpoints" / f"step-{step}" / STATE).read_text())["step"] == step
    assert not (out / "eval.json").exists() and not (out / "export").exists()

    result = main(load_config(QUICKSTART, RUN + [f"output_dir={out}", "train.resume=auto"]))

    assert result["train"]["resumed_from"].endswith(f"step-{step}")
    weights, log = reference
    diff = max_diff(load_file(out / "export" / "model.safetensors"), weights)
    print(f"SIGTERM at step {step}, resumed: max abs weight diff vs uninterrupted {diff:.3g}")
    assert diff <= 1e-6
    assert same_log((out / "train_log.jsonl").read_text().splitlines(), log)


def test_resume_settings_fail_before_any_work(tmp_path):
    old = tmp_path / "run" / "checkpoints" / "step-3"
    old.mkdir(parents=True)
    (old / STATE).write_text("{}")
    (tmp_path / "run" / MANIFEST).write_text("{}")
    cfg = load_config(QUICKSTART, [f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=r"already holds an unfinished run .*step-3\).*train\.resume=auto"):
        main(cfg)
    with pytest.raises(ConfigError, match=r"train\.resume=.*nowhere: not a complete checkpoint"):
        main(load_config(QUICKSTART, [f"output_dir={tmp_path / 'new'}", f"train.resume={tmp_path / 'nowhere'}"]))


def test_prune_keeps_the_newest_complete_checkpoints(tmp_path):
    """Complete means closed by the marker; a folder without one (cut short, or not rm's) is neither counted
    against the limit nor removed."""
    for step in (2, 10, 4, 8):
        (tmp_path / "checkpoints" / f"step-{step}").mkdir(parents=True)
        (tmp_path / "checkpoints" / f"step-{step}" / STATE).write_text("{}")
        (tmp_path / "checkpoints" / f"step-{step}" / MARKER).write_text('{"files": {}}')
    (tmp_path / "checkpoints" / "step-12").mkdir()
    (tmp_path / "checkpoints" / "step-12" / STATE).write_text("{}")
    (tmp_path / "checkpoints" / ".partial-step-12").mkdir()
    prune(tmp_path, keep=2)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["step-10", "step-12", "step-8"]
    prune(tmp_path, keep=0)  # 0 keeps all
    assert [s for s, _ in RunDir(tmp_path).marked_checkpoints()] == [8, 10]


def test_resuming_a_run_saved_before_split_versions_keeps_its_hold_out_by_record(tmp_path):
    """A checkpoint whose config.yaml has no data.split_version held out by record: resuming it must too, or the
    resumed run would train on pairs it held out and evaluate on others. Its data.eos is kept the same way."""
    from rm.config import RunConfig
    from rm.training.checkpoint import with_its_split

    old, new = tmp_path / "step-4", tmp_path / "step-8"
    for folder, data in ((old, "data:\n  eval_split: ''\n"), (new, "data:\n  eval_split: ''\n  split_version: 2\n")):
        folder.mkdir()
        (folder / "config.yaml").write_text(data)
    cfg = RunConfig()
    assert with_its_split(cfg, old).data.split_version == 1
    assert with_its_split(cfg, new).data.split_version == 2
    assert with_its_split(cfg, None) is cfg
    from dataclasses import replace

    eos = replace(cfg, data=replace(cfg.data, eos="eos"))
    assert with_its_split(eos, old).data.eos == "none"  # saved before data.eos existed: responses ended bare
    (new / "config.yaml").write_text("data:\n  eos: space_eos\n  split_version: 2\n")
    assert with_its_split(cfg, new).data.eos == "space_eos"
