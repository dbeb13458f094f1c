"""Which trial runs: a grid's points queued once, and a budget of `n_trials` that holds across processes.

Optuna's own loop cannot promise either when several threads or sweep processes share a study: its
GridSampler picks an unvisited point in each process independently (two can pick the same one and
leave another out), and each thread asks a new trial after the last one ended, so the sweep could
end one trial per thread over `n_trials`. So each sweep thread runs its own loop (rm/sweep/driver.py):

- a grid is queued up front: the creating process enqueues each point (the first `n_trials` of an
  order shuffled by `seed`) as a WAITING trial with its parameters fixed, only points no trial holds
  yet (a restart adds nothing; an interrupted trial's point is queued again by `recover`), and grid
  workers only take waiting trials;
- every trial taken is admitted or skipped by one rule each process computes alike from the study:
  trials are placed by the number of the trial they rerun (their own number for a first run), and a
  trial runs only if fewer than `n_trials` slots (grid points, for a grid) are held by the trials placed
  before it, its own slot (point) among them not. A skipped trial is failed at once with the user attr
  `rm_skipped` (why), before any value is drawn, and is left out of the tally and the reports; the thread
  that drew a new trial over the budget stops. Two processes deciding at once agree, as the place of a
  trial never changes and a trial counted by mistake (not yet skipped) is one placed after the budget.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

try:
    import fcntl
except ImportError:  # Windows: no lock (two threads of a SQLite sweep there could take one trial)
    fcntl = None

from rm.sweep.config import SweepConfig
from rm.sweep.storage import sqlite_file
from rm.sweep.study import RETRY_OF, SKIPPED, kept_trials, trial_budget

Point = tuple


def grid_points(cfg: SweepConfig) -> list[dict]:
    """Every combination of the grid's values, in the order set by `seed`; a sweep runs the first n_trials."""
    keys = list(cfg.space)
    points = [
        dict(zip(keys, values, strict=True)) for values in itertools.product(*(cfg.space[k].values for k in keys))
    ]
    random.Random(cfg.seed).shuffle(points)
    return points


def _point(cfg: SweepConfig, params: dict) -> Point | None:
    return tuple(params[k] for k in cfg.space) if all(k in params for k in cfg.space) else None


def enqueue_grid(study: optuna.Study, cfg: SweepConfig) -> int:
    """Queue the grid points of the budget that no trial (skipped ones aside) holds; return how many."""
    held = {_point(cfg, t.params) for t in kept_trials(study)}
    need = trial_budget(cfg) - len(held - {None})
    new = [p for p in grid_points(cfg) if _point(cfg, p) not in held][: max(0, need)]
    dists = {k: CategoricalDistribution(cfg.space[k].values) for k in cfg.space}
    for params in new:
        study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, params=params, distributions=dists))
    return len(new)


@contextmanager
def _one_taker(url: str) -> Iterator[None]:
    """Only one thread of any process on this machine takes a trial at a time, for a SQLite study.

    Taking a waiting trial is a compare-and-set in the storage (WAITING -> RUNNING) that holds on a
    database server by a row lock (SELECT … FOR UPDATE); SQLite has none, and two threads did take the
    same trial. A SQLite file serves one machine, so a file lock next to it is enough."""
    db = sqlite_file(url)  # the file, not the URL: a query (?password=…) once named the lock file
    if fcntl is None or db is None:
        yield
        return
    with open(f"{db}.take.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # each open() is its own lock: threads of one process wait too
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def take(study: optuna.Study, grid: bool, url: str) -> tuple[optuna.Trial, bool] | None:
    """A waiting trial (queued grid point or rerun), else for a sampler a new one: (trial, new); None: none left.

    Two processes never take the same waiting trial (see _one_taker); `url` is the study's storage URL."""
    with _one_taker(url):
        return _take(study, grid)


def _take(study: optuna.Study, grid: bool) -> tuple[optuna.Trial, bool] | None:
    storage = study._storage
    for t in storage.get_all_trials(study._study_id, deepcopy=False, states=(TrialState.WAITING,)):
        try:
            if storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING):
                return optuna.Trial(study, t._trial_id), False
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process took and ended it meanwhile
    if grid:
        return None
    trial = study.ask()  # may pop a rerun queued meanwhile; else a fresh trial
    return trial, RETRY_OF not in study._storage.get_trial_system_attrs(trial._trial_id)


def _chain(t: FrozenTrial, by_number: dict[int, FrozenTrial]) -> list[int]:
    """`t`'s number, then those of the trials it reruns, back to the first run (whose number is its place)."""
    out = [t.number]
    while RETRY_OF in t.system_attrs and t.system_attrs[RETRY_OF] in by_number:
        t = by_number[t.system_attrs[RETRY_OF]]
        out.append(t.number)
    return out


def skip_reason(study: optuna.Study, trial: optuna.Trial, cfg: SweepConfig) -> str | None:
    """Why `trial` must not run (its slot is held, or the budget is spent before it), or None: it runs."""
    trials = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    place = {t.number: _chain(t, by_number)[-1] for t in trials}  # the number of the first run it reruns
    me = by_number[trial.number]
    chain = _chain(me, by_number)
    grid = cfg.sampler == "grid"
    held: dict = {}  # slot (a grid point, else a place) -> the first trial before this one that holds it
    for t in sorted(trials, key=lambda t: (place[t.number], t.number)):
        if (place[t.number], t.number) >= (place[me.number], me.number):
            break
        if SKIPPED not in t.user_attrs and t.number not in chain:
            held.setdefault(_point(cfg, t.params) if grid else place[t.number], t.number)
    held.pop(None, None)  # a trial that drew nothing yet
    mine = _point(cfg, me.params) if grid else place[me.number]
    if mine in held:
        return f"its {'grid point' if grid else 'place'} is held by trial {held[mine]}"
    if len(held) >= trial_budget(cfg):
        return f"n_trials ({trial_budget(cfg)}) is spent by the trials before it"
    return None


def skip(study: optuna.Study, trial: optuna.Trial, reason: str) -> None:
    trial.set_user_attr(SKIPPED, reason)
    study.tell(trial, state=TrialState.FAIL)


@contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Beat for `trial` while it is held (as Study.optimize does), so another process can tell when it dies."""
    storage = study._storage
    interval = storage.get_heartbeat_interval() if hasattr(storage, "get_heartbeat_interval") else None
    if not interval:
        yield
        return
    done = threading.Event()

    def beat() -> None:
        while True:
            storage.record_heartbeat(trial._trial_id)
            if done.wait(interval):
                return

    thread = threading.Thread(target=beat, daemon=True, name=f"heartbeat-{trial.number}")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
