"""Sweep workers sharing a study on a real PostgreSQL server, as on several machines.

A throwaway server (the PostgreSQL binaries of the machine, e.g. Debian's postgresql package, in a
temporary data directory on 127.0.0.1 and a free port) is started for this module and stopped after
it. `python -m rm sweep FILE --storage postgresql://…` creates the study and a second process with
`--worker` joins it: both run trials, each grid point once, and the results table lists every trial.
Then one sweep process and its trial's child (`launch: subprocess`) are killed with SIGKILL (a lost
machine): the other process, still running, finds the trial's heartbeat stale after
`heartbeat_grace` seconds, fails it and runs it again.
"""

import csv
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import QUICKSTART, REPO, TINY_MODEL, wait_for
from rm.sweep.study import RETRY_OF

pytest.importorskip(
    "psycopg", reason="the PostgreSQL driver comes with the sweep-db extra: pip install -e '.[sweep-db]'"
)
optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.slow
TINY = [  # a few seconds a trial: 6 optimizer steps, no periodic eval, no export
    "data.synthetic.n_train=120",
    "data.synthetic.n_eval=30",
    *TINY_MODEL,
    "collator.max_length=128",
    "train.max_steps=6",
    "train.eval_steps=0",
    "train.save_steps=0",
    "train.report_to=[]",
    "export.enabled=false",
    "train.num_threads=1",
]


def postgres_bin() -> Path | None:
    """The directory of initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    """A PostgreSQL server of its own for this module; torn down (data directory included) after it.

    The server refuses to run as root, so under root it runs as the `postgres` user, in a directory
    that user owns (pytest's tmp_path is private to root)."""
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql")
    as_user = []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a postgres user: PostgreSQL refuses to run as root")
        if shutil.which("runuser") is None:
            pytest.skip("running as root, and no runuser to start PostgreSQL as another user")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="rm-postgres-"))
    if as_user:
        shutil.chown(root, "postgres")
    port, data = free_port(), root / "data"

    def pg(*args: str) -> None:
        subprocess.run(as_user + list(args), check=True, capture_output=True, timeout=120)

    pg(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "rm", "-E", "UTF8", "--no-sync")
    options = f"-h 127.0.0.1 -p {port} -k {root} -F"  # -F: no fsync, a throwaway server
    pg(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "server.log"), "-w", "start")
    try:
        yield f"postgresql://rm@127.0.0.1:{port}/postgres"
    finally:
        stop = [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
        subprocess.run(as_user + stop, capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def sweep_file(tmp_path: Path, name: str, grid: list[float], **keys) -> Path:
    raw = {"base": str(QUICKSTART), "overrides": TINY, "sweep_dir": str(tmp_path / name), "study_name": name}
    raw |= {"sampler": "grid", "launch": "subprocess", "pruning": {"pruner": "none"}, "space": {"train.lr": grid}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw | keys, sort_keys=False))
    return path


def start(path: Path, url: str, log: Path, worker: bool) -> subprocess.Popen:
    """A sweep process in a session of its own: killing its group kills it and its trial's children."""
    cmd = [sys.executable, "-m", "rm", "sweep", str(path), "--storage", url] + (["--worker"] if worker else [])
    env = os.environ | {"PYTHONUNBUFFERED": "1"}  # its log shows at once when the study is open
    with open(log, "w") as f:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def study_opened(log: Path, name: str):
    """Whether the sweep process writing `log` has opened (or created) its study: it then prints its tally.

    Polling the database instead could race the first process creating Optuna's tables."""
    return lambda: f"sweep {name}: " in log.read_text()


def trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    if name not in optuna.get_all_study_names(url):
        return []
    return optuna.load_study(study_name=name, storage=url).get_trials()


def finish(proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    proc.wait(timeout=timeout)
    assert proc.returncode == 0, log.read_text()[-3000:]


def test_a_second_worker_joins_the_study_and_both_run_trials(tmp_path, postgres_url):
    """A grid of 4: the creating process queues the points, and the two processes run each exactly once."""
    grid = [1e-3, 2e-3, 3e-3, 4e-3]
    path = sweep_file(tmp_path, "split", grid, launch="auto")
    first = start(path, postgres_url, tmp_path / "first.log", worker=False)
    wait_for(study_opened(tmp_path / "first.log", "split"), "the first process to create the study", [first])
    second = start(path, postgres_url, tmp_path / "second.log", worker=True)
    finish(first, tmp_path / "first.log")
    finish(second, tmp_path / "second.log")

    done = trials(postgres_url, "split")
    assert len(done) == 4 and all(t.state == TrialState.COMPLETE for t in done)  # nothing run twice or skipped
    assert sorted(t.params["train.lr"] for t in done) == grid
    by_process = {pid: sum(t.user_attrs["pid"] == pid for t in done) for pid in (first.pid, second.pid)}
    print(f"trials run by the first process and by the worker: {list(by_process.values())}")
    assert all(by_process.values()), f"one process ran no trial: {by_process}"
    with open(tmp_path / "split" / "results.csv") as f:
        assert sorted(int(r["trial"]) for r in csv.DictReader(f)) == [t.number for t in done]


def test_a_killed_workers_trial_is_rerun_by_the_other_after_its_heartbeat_stops(tmp_path, postgres_url):
    grace = 2
    path = sweep_file(tmp_path, "kill", [1e-3, 3e-3], heartbeat_interval=1, heartbeat_grace=grace)
    doomed = start(path, postgres_url, tmp_path / "doomed.log", worker=False)
    wait_for(study_opened(tmp_path / "doomed.log", "kill"), "the first process to create the study", [doomed])

    def child_running(pid: int) -> bool:
        return any(t.user_attrs.get("pid") == pid and "child_pid" in t.user_attrs for t in trials(postgres_url, "kill"))

    wait_for(lambda: child_running(doomed.pid), "the first process's trial to start its child", [doomed])
    survivor = start(path, postgres_url, tmp_path / "survivor.log", worker=True)
    # Killed once the survivor's own trial has started: it then looks for stale trials after that one.
    wait_for(lambda: child_running(survivor.pid), "the worker's trial to start its child", [doomed, survivor])
    os.killpg(doomed.pid, signal.SIGKILL)
    killed_at = datetime.now()
    doomed.wait()
    finish(survivor, tmp_path / "survivor.log")

    all_trials = trials(postgres_url, "kill")
    (killed,) = [t for t in all_trials if t.user_attrs["pid"] == doomed.pid]
    assert killed.state == TrialState.FAIL
    (rerun,) = [t for t in all_trials if t.system_attrs.get(RETRY_OF) == killed.number]
    assert rerun.state == TrialState.COMPLETE and rerun.params == killed.params
    assert rerun.user_attrs["pid"] == survivor.pid
    # Failed by the heartbeat's timeout, not at once: at least grace - interval after the last beat.
    waited = (killed.datetime_complete - killed_at).total_seconds()
    print(f"killed trial failed {waited:.1f} s after the SIGKILL (heartbeat_grace {grace} s)")
    assert waited >= grace - 1
    assert Counter(t.state for t in all_trials) == {TrialState.COMPLETE: 2, TrialState.FAIL: 1}
    with open(tmp_path / "kill" / "results.csv") as f:
        assert sorted(int(r["trial"]) for r in csv.DictReader(f)) == sorted(t.number for t in all_trials)
