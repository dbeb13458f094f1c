"""`python -m rm train CONFIG [key=value ...]`: one training run from a YAML config and dotted overrides."""

from __future__ import annotations

import argparse


def add(sub) -> None:
    p = sub.add_parser("train", help="train a reward model from a YAML run config")
    p.add_argument("config", help="run config YAML, e.g. configs/quickstart.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.lr=1e-4")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.config import load_config

    cfg = load_config(args.config, args.overrides)  # fail on a bad key before torch is imported
    from rm.training.run import main

    main(cfg)
    return 0
