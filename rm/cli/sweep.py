"""`python -m rm sweep SWEEP.yaml [key=value ...]`: tune a run config's keys with Optuna (rm/sweep/).

Also the hidden `python -m rm sweep-trial RUN.yaml [key=value ...]` that a sweep starts for each trial
in a child process: the same run as `train`, reporting its periodic evals to the sweep's study.
"""

from __future__ import annotations

import argparse
import sys

PRUNED = 3
"""Exit code of a trial child stopped by the sweep's pruner."""


def add(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="tune a run config's keys with Optuna: grid, random or TPE, pruning, restartable, many machines",
        description="Run the trials of a sweep YAML (configs/sweeps/), each a normal run under the sweep "
        "directory; rerun the same command to continue a stopped sweep.",
    )
    p.add_argument("config", help="sweep YAML, e.g. configs/sweeps/quickstart-lr.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="sweep keys, e.g. n_trials=8 sampler=random")
    p.add_argument("--dry-run", action="store_true", help="print the commands of the trials; run nothing")
    p.add_argument("--storage", metavar="URL", help="Optuna storage URL shared by workers (default: the file's)")
    p.add_argument("--worker", action="store_true", help="join a study started elsewhere and run trials for it")
    p.add_argument("--report-only", action="store_true", help="write the results table, best.yaml and plot")
    p.set_defaults(func=run)
    trial = sub.add_parser("sweep-trial")  # no help: not listed
    trial.add_argument("config")
    trial.add_argument("overrides", nargs="*")
    trial.set_defaults(func=run_trial)


def run(args: argparse.Namespace) -> int:
    try:
        import optuna
    except ImportError as e:
        print(f"error: sweeps need optuna ({e}): pip install 'rm-trainer[sweep]'", file=sys.stderr)
        return 2
    # Optuna's own "[I ...] A new study created / Trial 0 finished" lines repeat what the sweep prints itself.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from rm.sweep.config import load_sweep
    from rm.sweep.driver import dry_run, report_only
    from rm.sweep.driver import run as run_sweep
    from rm.sweep.study import resolve

    sweep = resolve(args.config, load_sweep(args.config, args.overrides), args.storage or "")
    if args.dry_run:
        return dry_run(sweep)
    if args.report_only:
        return report_only(sweep)
    return run_sweep(sweep, worker=args.worker)


def run_trial(args: argparse.Namespace) -> int:
    from rm.config import load_config

    cfg = load_config(args.config, args.overrides)
    import optuna

    from rm.cli.train import train
    from rm.sweep.trial import reporter_from_env

    try:
        return train(cfg, on_eval=reporter_from_env())  # 143 or 130 when stopped early: requeued by the sweep
    except optuna.TrialPruned as e:
        print(f"stopped: {e} (the sweep's pruner judged this trial weak)", file=sys.stderr)
        return PRUNED
