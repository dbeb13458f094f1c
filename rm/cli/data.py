"""`python -m rm data inspect SOURCE`: what a source holds and what loading it would do (rm/tokens/inspection.py)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from rm.cli.options import DataFlags
from rm.config.flags import add_flags


def add(sub) -> None:
    data = sub.add_parser(
        "data",
        help="look at preference data before training on it",
        description="Look at preference data before training on it: `data inspect SOURCE` reads it as a run would.",
    )
    data_sub = data.add_subparsers(dest="data_command", required=True, help="inspect: what a source holds")
    p = data_sub.add_parser(
        "inspect",
        help="counts, token lengths, shared prefix, truncation and every bad record of a source (and for groups: "
        "responses per group, ties, ranks)",
        description="Read SOURCE as a run would and report what it holds and what loading it would skip.",
    )
    p.add_argument(
        "source",
        help="a file (.jsonl[.gz], .json[.gz], .csv[.gz], .parquet), an hh-rlhf-style directory or a Hub name",
    )
    p.add_argument("--on-bad-record", choices=["error", "skip"], help="default error: stop at the first one")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--split", default="train", help="split to read from a directory or the Hub (train)")
    p.add_argument("--subsets", nargs="*", default=[], help="subsets to keep, by spaces or commas (after SOURCE)")
    p.add_argument("--tokenizer", default="", help="tokenizer for lengths (default: a BPE trained on SOURCE)")
    p.add_argument("--max-length", type=int, default=512, help="report what this max_length would cut")
    p.add_argument("--vocab-size", type=int, default=8192, help="vocab of the BPE trained without --tokenizer")
    add_flags(p, DataFlags)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.cli.options import data_config, subset_list
    from rm.tokens.inspection import format_text, inspect_source

    cfg = data_config(args)
    cfg = replace(cfg, source=str(Path(args.source)) if Path(args.source).exists() else args.source)
    cfg = replace(cfg, on_bad_record=args.on_bad_record or cfg.on_bad_record)
    if args.subsets:
        cfg = replace(cfg, subsets=subset_list(args.subsets))
    result = inspect_source(cfg, args.split, args.tokenizer, args.max_length, args.vocab_size)
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.json else format_text(result))
    return 0
