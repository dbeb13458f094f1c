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


def _inspect(args: argparse.Namespace) -> int:
    from rm.inspect_data import main

    return main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a reward model from a YAML run config")
    train.add_argument("config", help="run config YAML, e.g. configs/quickstart.yaml")
    train.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.lr=1e-4")
    train.set_defaults(func=_train)

    data = sub.add_parser("data", help="look at preference data before training on it")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    inspect = data_sub.add_parser(
        "inspect",
        help="counts, token lengths, shared prefix, truncation and every bad record of a source",
        description="Read SOURCE as a run would and report what it holds and what loading it would skip.",
    )
    inspect.add_argument(
        "source", help="a file (.jsonl[.gz], .json, .csv, .parquet), an hh-rlhf directory or a Hub name"
    )
    inspect.add_argument("--format", choices=["auto", "hh", "prompt", "conversation", "argilla", "red-team"])
    inspect.add_argument("--on-bad-record", choices=["error", "skip"], help="default error: stop at the first one")
    inspect.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    inspect.add_argument("--split", default="train", help="split to read from a directory or the Hub (train)")
    inspect.add_argument("--subsets", default="", help="comma-separated subsets to keep")
    inspect.add_argument("--tokenizer", default="", help="tokenizer for lengths (default: a BPE trained on SOURCE)")
    inspect.add_argument("--max-length", type=int, default=512, help="report what this max_length would cut")
    inspect.add_argument("--vocab-size", type=int, default=8192, help="vocab of the BPE trained without --tokenizer")
    inspect.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a data.* config key, repeatable: --set argilla.pairs_from_edits=true --set columns.chosen=good",
    )
    inspect.set_defaults(func=_inspect)
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
