"""One sweep trial: a normal run (its own output_dir and config.yaml) in this process or in a child.

In a child (`accelerate launch … -m rm sweep-trial …` or `python -m rm sweep-trial …`) the run reports
its periodic evals to the study itself: the sweep passes the storage URL, study name and trial id in
`RM_SWEEP_*` environment variables, and the child builds from them the same `on_eval` hook that an
in-process trial gets. `python -m rm train` knows nothing of sweeps: a trial's command, shown with
`train`, reruns the trial as an ordinary run.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import optuna

from rm.config.rundir import RunDir
from rm.errors import TrialCrashed
from rm.sweep.config import SweepConfig, objective_value
from rm.sweep.study import requeue
from rm.sweep.sweep_metric import MissingMetric

ENV_STORAGE, ENV_STUDY, ENV_TRIAL = "RM_SWEEP_STORAGE", "RM_SWEEP_STUDY", "RM_SWEEP_TRIAL_ID"
PRUNED_AT = "pruned_at_step"  # user attr: set by whichever process decided to prune
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals after which a trial's run exits having saved a checkpoint: the trial is rerun, not counted crashed."""
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None  # loaded before any fork


TRIAL_COMMAND = "sweep-trial"
"""The hidden `python -m rm` command a trial's child runs: `train` plus the hook that reports to the study."""


def run_command(cfg: SweepConfig, overrides: list[str], child: bool) -> list[str]:
    """The command that runs one trial: `accelerate launch` with the launcher config, else plain python.

    `child=False` gives the command a person types to rerun the trial as an ordinary run.
    """
    run = ["-m", "rm", TRIAL_COMMAND if child else "train", cfg.base, *overrides]
    if cfg.launcher:
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", cfg.launcher, *run]
    return [sys.executable, *run] if child else ["python", *run]


def show(cmd: list[str]) -> str:
    """A command as a person would type it (`python`, `accelerate launch`), quoted for the shell."""
    shown = list(cmd)
    if shown[0] == sys.executable:
        shown[0] = "python"
    if shown[:3] == ["python", "-m", "accelerate.commands.launch"]:
        shown[:3] = ["accelerate", "launch"]
    return shlex.join(shown)


def make_reporter(trial: optuna.Trial, cfg: SweepConfig) -> Callable[[int, dict], None]:
    """The `on_eval` hook of rm.training.run.main: report each periodic eval, raise TrialPruned when told to.

    Under several processes only rank 0 talks to the storage; its decision is broadcast so that every
    process stops together (one raising alone would leave the others waiting in a collective).
    """

    def on_eval(step: int, result: dict) -> None:
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized()
        prune = False
        if not distributed or dist.get_rank() == 0:
            try:
                trial.report(objective_value(result, cfg), step)
                prune = trial.should_prune()
            except MissingMetric:  # not reported: the sweep stops on the final eval.json, naming what it has
                pass
            if prune:
                trial.set_user_attr(PRUNED_AT, step)
        if distributed:
            box = [prune]
            dist.broadcast_object_list(box, src=0)
            prune = box[0]
        if prune:
            raise optuna.TrialPruned(f"pruned at step {step}")

    return on_eval


def reporter_from_env() -> Callable[[int, dict], None] | None:
    """In a child launched by a sweep: the hook that reports to its trial; None in an ordinary run."""
    if ENV_TRIAL not in os.environ:
        return None
    from rm.sweep.study import load_study_for_trial

    die_with_parent()  # a trial outlives no sweep: accelerate's own children go when it goes
    study, cfg = load_study_for_trial(os.environ[ENV_STORAGE], os.environ[ENV_STUDY])
    return make_reporter(optuna.Trial(study, int(os.environ[ENV_TRIAL])), cfg)


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies, so a killed sweep leaves no orphans."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def run_in_process(trial: optuna.Trial, cfg: SweepConfig, overrides: list[str], log_path: Path) -> dict:
    """Run the trial here (1 process on CPU): the run's log records and any traceback go to `log_path`."""
    from rm.config import load_config
    from rm.training.run import main

    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)  # before train's basicConfig, which then adds no console handler: set the level here
    level = root.level
    root.setLevel(min(level, logging.INFO))
    try:
        result = main(load_config(cfg.base, overrides), on_eval=make_reporter(trial, cfg))
    except optuna.TrialPruned:
        raise
    except Exception as e:
        with open(log_path, "a") as f:
            f.write(traceback.format_exc())
        raise TrialCrashed(f"{type(e).__name__}: {e}") from e
    finally:
        root.setLevel(level)
        root.removeHandler(handler)
        handler.close()
    if result.get("interrupted"):  # Ctrl-C: the run saved a checkpoint; the sweep stops as before
        raise KeyboardInterrupt
    return result


def run_child(trial: optuna.Trial, cfg: SweepConfig, cmd: list[str], storage_url: str, log_path: Path) -> dict:
    """Run the trial's command in a child, its output to `log_path`; return the eval.json it wrote."""
    import json

    env = os.environ | {ENV_STORAGE: storage_url, ENV_STUDY: trial.study.study_name, ENV_TRIAL: str(trial._trial_id)}
    with open(log_path, "w") as log:
        log.write(f"$ {show(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent)
        trial.set_user_attr("child_pid", proc.pid)
        try:
            code = proc.wait()
        except BaseException:  # Ctrl-C: the child got it too; do not leave it behind
            proc.kill()
            proc.wait()
            raise
    pruned_at = trial.study._storage.get_trial_user_attrs(trial._trial_id).get(PRUNED_AT)
    if pruned_at is not None:  # the child reported, was judged weak and stopped
        raise optuna.TrialPruned(f"pruned at step {pruned_at}")
    if code != 0 and stopped_early(code, log_path):  # SIGTERM or Ctrl-C to the child alone: not a crash
        trial.set_user_attr("interrupted", True)
        requeue(trial.study, trial.study._storage.get_trial(trial._trial_id))
        raise TrialCrashed(f"interrupted (exit code {code}): its parameters are queued again")
    out = RunDir(cmd[-1].split("=", 1)[1])  # output_dir=… is always the last override
    if code != 0 or not out.eval_json.is_file():
        raise TrialCrashed(f"exit code {code}: {last_error(log_path)}")
    return json.loads(out.eval_json.read_text())


def stopped_early(code: int, log_path: Path) -> bool:
    """Whether a trial's child was stopped by SIGTERM or Ctrl-C (rm train exits 128 + the signal; a process
    killed by one shows -N) rather than crashing. `accelerate launch` turns any failure of its child into
    exit code 1, so the run's own line in the log ("stopped by SIGTERM after step N") says it then."""
    if code in {128 + s for s in STOP_SIGNALS} | {-s for s in STOP_SIGNALS}:
        return True
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return False
    return re.search(r"^(error: )?stopped by SIG(TERM|INT)\b", text, re.MULTILINE) is not None


def last_error(path: Path) -> str:
    """The line of a crashed trial's log that says why: the last `error: …` or `SomeError: …` line that is not
    `accelerate launch` reporting its child's exit (CalledProcessError), else the last line."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return "(no log)"
    errors = [
        line
        for line in lines
        if (line.startswith("error:") or re.match(r"^[\w.]+(Error|Exception|Exit)\b", line))
        and "CalledProcessError" not in line
    ]
    return (errors or lines or ["(empty log)"])[-1]
