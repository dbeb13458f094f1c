"""`python -m rm sweep SWEEP.yaml`: hyperparameter sweeps on Optuna, from one laptop to many machines.

The study (each trial's parameters, state, reported evals and notes) lives in an Optuna storage: a
SQLite file in the sweep directory by default, or any database URL that several machines reach
(`--storage URL --worker` on each); see rm/sweep/study.py for how a stopped sweep continues. Each
trial is a normal run in <sweep_dir>/trials/NNNN, in this process or launched as a child
(rm/sweep/trial.py); the results are written after every trial (rm/sweep/sweep_report.py).

Each of the `parallelism` threads of a sweep process runs its own ask-run-tell loop rather than
Optuna's `Study.optimize`: it takes a queued trial (a grid point, a rerun) or, for a sampler, a new one,
runs it only if the budget shared by all processes allows (rm/sweep/budget.py), and stops when there
is nothing left to take. `Study.optimize` would ask one trial per thread past `n_trials` and let
GridSampler pick the same point in two processes.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from rm.config.rundir import RunDir
from rm.errors import TrialCrashed
from rm.sweep.budget import enqueue_grid, grid_points, heartbeat, skip, skip_reason, take
from rm.sweep.config import ParamSpec, SweepConfig, direction, objective_name, objective_value
from rm.sweep.study import (
    HOST,
    RETRY_OF,
    Sweep,
    fail_stale,
    make_sampler,
    open_storage,
    open_study,
    recover,
    tally,
    trial_budget,
    trial_overrides,
)
from rm.sweep.sweep_metric import shown_metrics
from rm.sweep.sweep_report import METRICS, merge_best, write_reports
from rm.sweep.trial import run_child, run_command, run_in_process, show


def suggest(trial: optuna.Trial, key: str, spec: ParamSpec) -> bool | int | float | str:
    """The trial's value for one swept key: drawn by the sampler, or the stored one of a rerun."""
    if spec.values:
        return trial.suggest_categorical(key, spec.values)
    if spec.type == "int":
        return trial.suggest_int(key, int(spec.low), int(spec.high), step=int(spec.step or 1), log=spec.log)
    return trial.suggest_float(key, spec.low, spec.high, step=spec.step or None, log=spec.log)


def in_process(cfg: SweepConfig) -> bool:
    """Trials run here only one at a time without a launcher: train.main owns the process while it runs."""
    return cfg.launch == "in-process" or (cfg.launch == "auto" and not cfg.launcher and cfg.parallelism == 1)


def make_objective(sweep: Sweep):
    """Optuna's objective: run the trial as a normal run and return its objective; owner and log first."""
    cfg, here = sweep.cfg, in_process(sweep.cfg)

    def objective(trial: optuna.Trial) -> float:
        params = {key: suggest(trial, key, spec) for key, spec in cfg.space.items()}
        overrides = trial_overrides(sweep, params, trial.number)
        out = Path(overrides[-1].split("=", 1)[1])
        out.mkdir(parents=True, exist_ok=True)
        cmd = run_command(cfg, overrides, child=not here)
        shown = show(run_command(cfg, overrides, child=False))  # the same run, as a person would rerun it
        log = RunDir(out).trial_log
        attrs = {"output_dir": str(out), "log": str(log), "command": shown}
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        retry_of = trial.study._storage.get_trial_system_attrs(trial._trial_id).get(RETRY_OF)
        print(f"trial {trial.number}{f' (rerun of {retry_of})' if retry_of is not None else ''}: {shown}")
        try:
            result = (
                run_in_process(trial, cfg, overrides, log)
                if here
                else run_child(trial, cfg, cmd, sweep.storage_url, log)
            )
        except TrialCrashed as e:
            trial.set_user_attr("error", str(e)[:500])
            raise
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", True)
            raise
        trial.set_user_attr(METRICS, shown_metrics(result, cfg.objective.metric, cfg.objective.subset))
        return objective_value(result, cfg)  # a metric its eval.json lacks stops the sweep in one line

    return objective


def run_trial(study: optuna.Study, trial: optuna.Trial, objective, stop: threading.Event) -> None:
    """Run a taken trial and tell the study how it ended; a KeyboardInterrupt fails it and goes on up."""
    try:
        value = objective(trial)
    except optuna.TrialPruned:
        study.tell(trial, state=TrialState.PRUNED)
    except TrialCrashed:
        if stop.is_set():  # a child that Ctrl-C stopped (the terminal signals all): rerun it on a restart
            trial.set_user_attr("interrupted", True)
        study.tell(trial, state=TrialState.FAIL)
    except BaseException:
        study.tell(trial, state=TrialState.FAIL)
        raise
    else:
        study.tell(trial, value)  # a NaN objective fails the trial (Optuna warns)


def work(sweep: Sweep, study: optuna.Study, objective, stop: threading.Event, lock: threading.Lock) -> None:
    """One thread's loop: take a trial, run it if the budget allows, write the results; stop with nothing left."""
    grid, budget = sweep.cfg.sampler == "grid", trial_budget(sweep.cfg)
    while not stop.is_set():
        fail_stale(study)  # a dead worker's trial is requeued first, so that it is taken before anything new
        t = tally(study)
        if not grid and t["ended"] + t["running"] >= budget and not t["waiting"]:
            return  # spent as far as can be seen: asking would only make a trial to skip
        taken = take(study, grid, sweep.storage_url)
        if taken is None:
            return
        trial, new = taken
        try:
            with heartbeat(study, trial):
                trial.set_user_attr("host", HOST)  # at once: `recover` finds the trial if this process dies now
                trial.set_user_attr("pid", os.getpid())
                why = skip_reason(study, trial, sweep.cfg)
                if why is not None:
                    skip(study, trial, why)
                    if new:  # a new trial over the budget: any later one would be too
                        return
                    continue
                run_trial(study, trial, objective, stop)
        except BaseException:  # Ctrl-C before the trial ran: not left RUNNING, rerun by the next start
            if study._storage.get_trial(trial._trial_id).state == TrialState.RUNNING:
                trial.set_user_attr("interrupted", True)
                study.tell(trial, state=TrialState.FAIL)
            raise
        with lock:
            write_reports(study, sweep)


def run(sweep: Sweep, worker: bool = False) -> int:
    study = open_study(sweep, create=not worker)
    for note in recover(study):
        print(note)
    cfg = sweep.cfg
    queued = enqueue_grid(study, cfg) if cfg.sampler == "grid" and not worker else 0
    budget, t = trial_budget(cfg), tally(study)
    todo = t["waiting"] if cfg.sampler == "grid" else max(0, budget - t["ended"] - t["running"]) + t["waiting"]
    news = f" ({queued} grid points queued)" if queued else ""
    print(f"sweep {sweep.name}: {t['ended']} of {budget} trials ended, {todo} to run{news}; study in {sweep.shown_url}")
    if todo:
        stop, lock, objective, errors = threading.Event(), threading.Lock(), make_objective(sweep), []

        def guarded() -> None:  # a thread's error ends the sweep, raised here, as the main thread's would
            try:
                work(sweep, study, objective, stop, lock)
            except Exception as e:
                errors.append(e)
                stop.set()

        threads = [threading.Thread(target=guarded, daemon=True) for _ in range(min(cfg.parallelism, todo) - 1)]
        warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)  # rm beats itself (budget.heartbeat)
        try:
            for thread in threads:
                thread.start()
            work(sweep, study, objective, stop, lock)  # here: an in-process trial gets Ctrl-C
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
            if errors:
                raise errors[0]
        except KeyboardInterrupt:
            stop.set()
            if any(thread.is_alive() for thread in threads):
                print("\nstopping: waiting for the other running trials (Ctrl-C again to leave them)")
                try:
                    for thread in threads:
                        thread.join()
                except KeyboardInterrupt:
                    pass  # left RUNNING: the restart finds their process gone and reruns them
            write_reports(study, sweep)
            print("\nstopped: rerun the same command to continue (the interrupted trial runs again)")
            return 130
        except BaseException:
            stop.set()  # the other threads take nothing more
            raise
    paths = write_reports(study, sweep)
    print("\n" + paths["md"].read_text())
    print("written: " + ", ".join(str(p) for p in paths.values()))
    if (merged := merge_best(study, sweep)) is not None:
        print(f"merged the {sweep.cfg.merge.top_k} best trials into {merged}")
    return 0


def dry_run(sweep: Sweep) -> int:
    """Print the commands of the trials a new sweep would run; nothing is written or started."""
    cfg = sweep.cfg
    budget = trial_budget(cfg)
    mode = "in this process" if in_process(cfg) else f"{cfg.parallelism} at a time, each in a child process"
    print(f"sweep {sweep.name}: {cfg.sampler} sampler, {budget} trials, {mode}")
    print(f"objective: {direction(cfg)} {objective_name(cfg)}; study in {sweep.shown_url}")
    db = sweep.dir / "study.db"
    if not cfg.storage and db.is_file():
        t = tally(optuna.load_study(study_name=sweep.name, storage=open_storage(sweep.storage_url, heartbeat=False)))
        print(
            f"{db} exists: {t['ended']} trials ended, {t['running']} running; a run continues it (below: a new sweep)"
        )
    if cfg.sampler == "tpe":
        print("tpe: later draws depend on the results; these are the first draws")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=make_sampler(cfg, cfg.seed), direction=direction(cfg))  # in memory
    points = grid_points(cfg) if cfg.sampler == "grid" else []
    for number in range(budget):
        trial = study.ask()
        params = points[number] if points else {key: suggest(trial, key, spec) for key, spec in cfg.space.items()}
        print(show(run_command(cfg, trial_overrides(sweep, params, number), child=False)))
    return 0


def report_only(sweep: Sweep) -> int:
    """Write the results table, best.yaml and plot of an existing study, and print the table."""
    paths = write_reports(open_study(sweep, create=False, read_only=True), sweep)
    print("\n" + paths["md"].read_text())
    return 0
