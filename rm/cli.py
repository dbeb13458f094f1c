"""Command line: `python -m rm COMMAND ...` (also `accelerate launch -m rm COMMAND ...`).

Commands import their module lazily so `python -m rm --help` answers without loading torch.
"""

from __future__ import annotations

import argparse
import os
import sys


def _train(args: argparse.Namespace) -> int:
    from rm.config import load_config

    cfg = load_config(args.config, args.overrides)  # fail on a bad key before torch is imported
    from rm.train import main

    main(cfg)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a reward model from a YAML run config")
    train.add_argument("config", help="run config YAML, e.g. configs/quickstart.yaml")
    train.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.lr=1e-4")
    train.set_defaults(func=_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    from rm.config import ConfigError
    from rm.data import DataError

    try:
        return args.func(args)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
