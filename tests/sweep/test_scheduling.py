"""Which trials a sweep runs when several processes and threads share one study (rm/sweep/budget.py).

Two sweep processes (the one that creates the study and a `--worker`), each with parallelism 2, on
one SQLite study; their trials are stand-ins that train nothing (tests/sweep/stand_in.py) and are held
until all four threads have one, then released together, so that the processes race for the queue
and the budget. A grid runs each point exactly once; a random sweep runs exactly n_trials; a creating
process killed with SIGKILL and started again reruns its two trials and queues nothing new.
"""

import functools
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from conftest import QUICKSTART, REPO, wait_for
from rm.sweep.budget import enqueue_grid, grid_points, skip, skip_reason, take
from rm.sweep.config import load_sweep
from rm.sweep.study import RETRY_OF, SKIPPED, open_study, recover, requeue, resolve, tally
from rm.sweep.sweep_report import rows

optuna.logging.set_verbosity(optuna.logging.WARNING)
GRID = {"train.lr": [1e-3, 2e-3, 3e-3], "loss.center_rewards_coef": [0.0, 0.01, 0.02]}


def sweep_file(tmp_path: Path, **keys) -> Path:
    raw = {"base": str(QUICKSTART), "sweep_dir": str(tmp_path / "sweep"), "sampler": "grid", "parallelism": 2}
    raw |= {"pruning": {"pruner": "none"}, "space": GRID} | keys
    path = tmp_path / "race.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def start(path: Path, log: Path, worker: bool = False) -> subprocess.Popen:
    cmd = [sys.executable, str(REPO / "tests" / "sweep" / "stand_in.py"), "sweep", str(path)]
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
        "RM_TEST_GATE": str(path.parent / "gate"),
    }
    with open(log, "w") as f:
        return subprocess.Popen(cmd + (["--worker"] if worker else []), cwd=REPO, env=env, stdout=f, stderr=f)


wait_for = functools.partial(wait_for, timeout=300)  # guards a hang only: a stand-in sweep opens in seconds


def trials(path: Path) -> list[optuna.trial.FrozenTrial]:
    url = f"sqlite:///{path.parent / 'sweep' / 'study.db'}"
    return optuna.load_study(study_name=path.stem, storage=url).get_trials()


def held(path: Path, pid: int) -> int:
    """Trials that process `pid` holds now (taken, not ended)."""
    return sum(t.state == TrialState.RUNNING and t.user_attrs.get("pid") == pid for t in trials(path))


def opened(log: Path):
    """Whether the sweep process writing `log` has opened its study (and queued its grid): it prints its tally.
    Opening the database before that could race that process creating Optuna's tables."""
    return lambda: "sweep race: " in log.read_text()


def race(path: Path, tmp_path: Path, together: bool = False) -> tuple[subprocess.Popen, subprocess.Popen]:
    """The creating process and a worker, each holding trials, then released together; both must end well.

    `together`: the study is created here and both start at once, so that both may ask before either
    has a trial (a grid worker must instead start after the creating process has queued the grid)."""
    if together:
        open_study(resolve(path, load_sweep(path)), create=True)
    first = start(path, tmp_path / "first.log")
    if not together:
        wait_for(opened(tmp_path / "first.log"), "the first process to open the study", [first])
        wait_for(lambda: held(path, first.pid) == 2, "the first process's 2 trials", [first])
    second = start(path, tmp_path / "second.log", worker=True)
    procs = [first, second]
    wait_for(lambda: held(path, first.pid) and held(path, second.pid), "a trial in each process", procs)
    time.sleep(0.5)  # any thread still asking asks now
    (path.parent / "gate").touch()
    for proc, log in ((first, "first.log"), (second, "second.log")):
        proc.wait(timeout=120)
        assert proc.returncode == 0, (tmp_path / log).read_text()[-3000:]
    return first, second


def points(ts) -> list[tuple]:
    return sorted(tuple(t.params[k] for k in GRID) for t in ts)


@pytest.mark.slow
def test_two_workers_with_two_threads_each_run_every_grid_point_exactly_once(tmp_path):
    path = sweep_file(tmp_path)
    first, second = race(path, tmp_path)
    ts = trials(path)
    by_pid = Counter(t.user_attrs["pid"] for t in ts)
    print(f"grid points run by the creating process and by the worker: {by_pid[first.pid]}, {by_pid[second.pid]}")
    assert points(ts) == sorted(itertools.product(*GRID.values()))  # each point once, none left out
    assert len(ts) == 9 and all(t.state == TrialState.COMPLETE for t in ts)  # nothing skipped or run twice
    assert by_pid[first.pid] >= 2 and by_pid[second.pid] >= 1 and by_pid.total() == 9


@pytest.mark.slow
def test_a_random_sweep_shared_by_two_processes_runs_exactly_n_trials(tmp_path):
    """Both processes start at once: up to four threads may ask before any trial is held, and each asks
    again as its trial ends. Whatever the timing, exactly n_trials = 3 run; a trial asked past them
    (if any) is skipped before it draws a value (the rule itself: the test below)."""
    space = {"train.lr": {"low": 1e-4, "high": 1e-2, "log": True}}
    path = sweep_file(tmp_path, sampler="random", n_trials=3, space=space)
    first, second = race(path, tmp_path, together=True)
    ts = trials(path)
    ran = [t for t in ts if SKIPPED not in t.user_attrs]
    skipped = [t for t in ts if SKIPPED in t.user_attrs]
    assert len(ran) == 3 and all(t.state == TrialState.COMPLETE for t in ran)
    assert {t.user_attrs["pid"] for t in ran} == {first.pid, second.pid}
    print(f"trials asked past n_trials and skipped: {len(skipped)}")
    assert len(skipped) <= 4 and all(t.state == TrialState.FAIL and not t.params for t in skipped)
    assert all(t.user_attrs[SKIPPED] == "n_trials (3) is spent by the trials before it" for t in skipped)
    assert all(s.number > t.number for s in skipped for t in ran)
    assert tally(optuna.load_study(study_name="race", storage=f"sqlite:///{tmp_path}/sweep/study.db"))["ended"] == 3
    table = (tmp_path / "sweep" / "results.csv").read_text().splitlines()
    assert sorted(int(line.split(",")[0]) for line in table[1:]) == [t.number for t in ran]


@pytest.mark.slow
def test_a_killed_creator_restarted_completes_its_share_of_the_grid_once(tmp_path):
    """n_trials=4 of the 9 points: the first 4 of the seeded order. The creating process is killed while
    it holds 2 of them; the worker runs its own and stops; the restart reruns the 2 and queues nothing."""
    path = sweep_file(tmp_path, n_trials=4)
    first = start(path, tmp_path / "first.log")
    wait_for(opened(tmp_path / "first.log"), "the first process to open the study", [first])
    wait_for(lambda: held(path, first.pid) == 2, "the first process's 2 trials", [first])
    second = start(path, tmp_path / "second.log", worker=True)
    wait_for(lambda: held(path, second.pid) == 2, "the worker's 2 trials", [first, second])
    first.send_signal(signal.SIGKILL)
    first.wait()
    (path.parent / "gate").touch()
    second.wait(timeout=120)
    assert second.returncode == 0, (tmp_path / "second.log").read_text()[-3000:]
    assert Counter(t.state for t in trials(path)) == {TrialState.COMPLETE: 2, TrialState.RUNNING: 2}

    again = start(path, tmp_path / "again.log")
    again.wait(timeout=120)
    out = (tmp_path / "again.log").read_text()
    assert again.returncode == 0, out[-3000:]
    assert out.count("marked failed (its sweep process") == 2 and "grid points queued" not in out
    ts = trials(path)
    done = [t for t in ts if t.state == TrialState.COMPLETE]
    killed = [t for t in ts if t.state == TrialState.FAIL]
    want = grid_points(load_sweep(path))[:4]
    assert points(done) == sorted(tuple(p[k] for k in GRID) for p in want)
    assert len(ts) == 6 and len(killed) == 2 and not any(SKIPPED in t.user_attrs for t in ts)
    assert {t.user_attrs["pid"] for t in killed} == {first.pid}
    reruns = {t.system_attrs.get(RETRY_OF): t for t in done if RETRY_OF in t.system_attrs}
    assert sorted(reruns) == sorted(t.number for t in killed)
    assert all(reruns[t.number].params == t.params and reruns[t.number].user_attrs["pid"] == again.pid for t in killed)


def _turn(study, sweep):
    """One thread's step of rm/sweep/driver.py's loop, by hand: take a trial and say whether it may run."""
    trial, new = take(study, sweep.cfg.sampler == "grid", sweep.storage_url)
    return trial, new, skip_reason(study, trial, sweep.cfg)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_the_budget_rule_agrees_across_processes_and_places_a_rerun_where_its_trial_was(tmp_path):
    """Two Study objects on one storage stand for two processes. n_trials = 3: the fourth new trial is
    skipped; an interrupted trial's rerun runs in its place although it comes later; a second rerun of
    the same trial (two processes recovering it at once) is skipped."""
    path = sweep_file(tmp_path, sampler="random", n_trials=3, space={"train.lr": {"low": 1e-4, "high": 1e-2}})
    sweep = resolve(path, load_sweep(path))
    a, b = open_study(sweep, create=True), open_study(sweep, create=False)
    ran = []
    for study in (a, b, a):
        trial, new, why = _turn(study, sweep)
        assert new and why is None
        trial.suggest_float("train.lr", 1e-4, 1e-2)
        ran.append(trial)
    over, new, why = _turn(b, sweep)
    assert new and why == "n_trials (3) is spent by the trials before it"
    skip(b, over, why)
    assert over.number == 3 and b.trials[3].state == TrialState.FAIL and not b.trials[3].params

    ran[1].set_user_attr("interrupted", True)  # Ctrl-C: failed, to be rerun by the next start's recover
    a.tell(ran[1], state=TrialState.FAIL)
    assert len(recover(a)) == 1
    rerun, new, why = _turn(b, sweep)
    assert not new and why is None and rerun.number == 4 and rerun.params == ran[1].params
    requeue(b, b.trials[1])  # the same trial recovered by a second process
    again, new, why = _turn(a, sweep)
    assert not new and why == "its place is held by trial 4"
    skip(a, again, why)
    late, new, why = _turn(b, sweep)
    assert new and why == "n_trials (3) is spent by the trials before it"
    skip(b, late, why)

    for trial in (ran[0], ran[2], rerun):
        a.tell(trial, 0.5)
    assert tally(a) == {"ended": 3, "interrupted": 1, "running": 0, "waiting": 0}
    assert [r["trial"] for r in rows(a, sweep)] == [0, 2, 4, 1]  # the skipped 3, 5 and 6 are left out
    assert sorted(t.number for t in a.trials if SKIPPED in t.user_attrs) == [3, 5, 6]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_grid_is_queued_once_and_a_point_queued_twice_runs_once(tmp_path):
    path = sweep_file(tmp_path, n_trials=4)
    sweep = resolve(path, load_sweep(path))
    a, b = open_study(sweep, create=True), open_study(sweep, create=False)
    order = grid_points(sweep.cfg)
    assert sorted(tuple(p.values()) for p in order) == sorted(itertools.product(*GRID.values()))
    assert order != grid_points(load_sweep(path, ["seed=1"]))  # the seed picks which n_trials points run
    assert enqueue_grid(a, sweep.cfg) == 4 and enqueue_grid(b, sweep.cfg) == 0  # a restart queues nothing
    assert [t.params for t in a.trials] == order[:4] and all(t.state == TrialState.WAITING for t in a.trials)
    # A second creating process that read the study before the first had queued: the same point again.
    dists = {k: CategoricalDistribution(v) for k, v in GRID.items()}
    b.add_trial(create_trial(state=TrialState.WAITING, params=order[0], distributions=dists))

    decisions = [_turn(study, sweep)[2] for study in (a, b, a, b, a)]
    assert decisions == [None] * 4 + ["its grid point is held by trial 0"]
    assert take(b, True, sweep.storage_url) is None  # a grid worker takes only queued points
    assert enqueue_grid(b, sweep.cfg) == 0
