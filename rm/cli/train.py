"""`python -m rm train CONFIG [key=value ...]`: one training run from a YAML config and dotted overrides.

Exit status: 0 when the run finished (or had finished already: `train.resume` of it changes nothing),
128 + the signal when SIGTERM or Ctrl-C stopped it early (143, 130; its checkpoint saved), so that
`rm train … && rm export …` and a job scheduler see a run that did not finish.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def add(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a reward model from a YAML run config",
        description="Train a reward model from a YAML run config and dotted key=value overrides (relative paths "
        "in the config are read from the current directory), writing the run directory output_dir.",
    )
    p.add_argument("config", help="run config YAML, e.g. configs/quickstart.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.lr=1e-4")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.config import load_config

    cfg = load_config(args.config, args.overrides)  # fail on a bad key before torch is imported
    return train(cfg)


def train(cfg, on_eval: Callable[[int, dict], None] | None = None) -> int:
    """Run `cfg` (rm.training.run.main) and return its exit status; also a sweep trial's child's."""
    from rm.training.faults import Terminated, exit_code
    from rm.training.run import main

    try:
        return exit_code(main(cfg, on_eval=on_eval))
    except Terminated:  # before training started: what the start wrote is taken back (rm/training/output_dir.py)
        print("\nerror: stopped by SIGTERM before training started (no checkpoint yet)", file=sys.stderr)
        return 128 + Terminated.signum
