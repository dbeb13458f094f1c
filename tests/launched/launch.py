"""The pytest side of the shared launches: `launched(N)` (the session fixture in tests/conftest.py) starts the job
of N processes that runs every scenario of tests/launched/scenarios.py meant for N, once a session, and hands
each test its scenario's folder, or fails the test with that scenario's traceback."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launched.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("scenarios.py")
ACCELERATE = str(Path(sys.executable).parent / "accelerate")
HANG_GUARD_S = 3600  # only ends a job that hangs: a whole launch takes minutes, even on 2 loaded cores


def free_port() -> int:
    """A port nobody listens on, so concurrent test runs do not collide on torchrun's default 29500."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launch:
    """What the job of `processes` processes left: each scenario's folder, the error of each that failed, and the
    inputs it ran with (a worker reads a launch another worker ran, with that worker's fixtures)."""

    def __init__(self, folder: Path, processes: int, errors: dict[str, str], inputs: dict[str, str]):
        self.folder, self.processes, self.errors, self.inputs = folder, processes, errors, inputs

    def run(self, name: str) -> Path:
        """The output_dir of scenario `name`; its error, if it failed, fails the calling test."""
        if name in self.errors:
            pytest.fail(
                f"scenario {name!r} failed under {self.processes} processes:\n{self.errors[name]}", pytrace=False
            )
        return self.folder / name / "run"

    def out(self, name: str) -> Path:
        """The scenario's own folder (its files beside `run/`, each process's stdout and stderr)."""
        self.run(name)
        return self.folder / name

    def stdout(self, name: str) -> str:
        """Every process's stdout during the scenario, rank by rank."""
        return "".join((self.out(name) / f"stdout-{r}.txt").read_text() for r in range(self.processes))

    def output(self, name: str) -> str:
        """Every process's stdout and stderr during the scenario."""
        return self.stdout(name) + "".join(
            (self.out(name) / f"stderr-{r}.txt").read_text() for r in range(self.processes)
        )


class Launches:
    """`launched(N)`: the job of N processes, started on first use and kept for the session.

    pytest-xdist's workers share `root` (a folder of the session, not of a worker): the first worker to need a
    launch runs it under a lock and records what failed in `<N>-done.json`; a worker that needs it meanwhile waits on
    the lock, and later ones read the record. So each launch runs once a session however the tests are spread
    (the tests also carry `xdist_group("launched")`, which pytest-xdist 3.8's --dist loadgroup no longer honours
    under pytest 9.2's structured node ids: pytest-dev/pytest-xdist#1386)."""

    def __init__(self, root: Path, inputs: dict[str, str]):
        self.root, self.inputs, self.done = root, inputs, {}

    def __call__(self, processes: int) -> Launch:
        if processes not in self.done:
            if processes == 3:
                self(2)  # the 3-process eval_rewards scores the export that the 2-process eval_train made
            folder, record = self.root / str(processes), self.root / f"{processes}-done.json"
            with open(self.root / f"{processes}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                if record.is_file():
                    saved = json.loads(record.read_text())
                    self.done[processes] = Launch(folder, processes, saved["errors"], saved["inputs"])
                else:
                    self.done[processes] = launch(folder, processes, self.inputs)
                    record.write_text(json.dumps({"errors": self.done[processes].errors, "inputs": self.inputs}))
        return self.done[processes]


def launch(folder: Path, processes: int, inputs: dict[str, str]) -> Launch:
    """Run the scenarios for `processes` in one job; where a scenario fails (which ends its job), those left run
    in a job of their own, so only the failed one's tests fail."""
    left = [name for name, s in SCENARIOS.items() if processes in s.processes]
    errors: dict[str, str] = {}
    while left:
        code, tail = job(folder, processes, inputs, left)
        ran = [name for name in left if list((folder / name).glob("started-*"))]
        for name in ran:
            status = [folder / name / f"status-{r}.json" for r in range(processes)]
            failed = [(r, e) for r, s in enumerate(status) if s.is_file() and (e := json.loads(s.read_text())["error"])]
            if failed:  # each failed process's traceback: the first to fail may be any of them
                errors[name] = "\n".join(f"=== process {r} ===\n{e}" for r, e in failed)
            elif not all(s.is_file() for s in status):
                errors[name] = f"the job ended during this scenario (exit code {code}):\n{tail}"
        if not ran:  # the job died before its first scenario: no later one would fare better
            errors |= {name: f"the job did not start (exit code {code}):\n{tail}" for name in left}
        left = [name for name in left if name not in ran]
    return Launch(folder, processes, errors, inputs)


def job(folder: Path, processes: int, inputs: dict[str, str], names: list[str]) -> tuple[int | None, str]:
    """One `accelerate launch` of scenarios.py: its exit code (None: ended by the hang guard) and stderr's end."""
    cmd = [ACCELERATE, "launch", "--config_file", "configs/accelerate/cpu-ddp.yaml", "--num_processes", str(processes)]
    cmd += ["--main_process_port", str(free_port()), str(SCRIPT), str(folder), json.dumps(inputs), *names]
    # The CPU on a GPU machine too; ACCELERATE_USE_CPU for the plain `Accelerator()` of `rm eval` (the yaml's
    # MULTI_GPU only makes accelerate start the processes with torchrun: rm's training sets up gloo by itself).
    env = os.environ | {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
                            start_new_session=True)  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        for pid in process_tree(proc.pid):  # the launcher, torchrun and the workers (each in a session of its own)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        return None, f"ended after {HANG_GUARD_S} s (a hang):\n{stderr[-3000:]}"
    return proc.returncode, stderr[-3000:]


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants, from /proc (Linux)."""
    out = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                out += process_tree(int(child))
    return out
