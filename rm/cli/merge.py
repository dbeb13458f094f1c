"""`python -m rm merge RUN_OR_EXPORT... --out DIR`: reward models fine-tuned from one initialization averaged into
one standard export (rm/scoring/weight_average.py)."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from rm.config.flags import add_flags, option


@dataclass
class MergeFlags:
    """`rm merge`'s options."""

    members: list[str] = option([], positional=True, nargs="+", metavar="RUN_OR_EXPORT")
    """two or more rm runs or exports fine-tuned from one initialization"""
    out: str = option("", required=True, metavar="DIR")
    """folder to write (must be empty or absent)"""
    weights: list[float] | None = option(None, nargs="+", metavar="W")
    """one weight per member (normalised to sum 1; unset: a uniform average)"""
    max_distance: float = option(0.5)
    """refuse a member whose weights are further than this (||w - w_merged|| / ||w_merged||) from the average"""
    no_eval: bool = option(False)
    """skip scoring the merged weights on the first member's held-out pairs (the card then has no merged accuracy)"""
    dtype: str = option("float32", choices=["float32", "bfloat16", "float16"])
    """dtype the members are read and the merge written in"""
    overwrite: bool = option(False)
    """replace an earlier export in --out"""


def add(sub) -> None:
    p = sub.add_parser(
        "merge",
        help="average reward models fine-tuned from one initialization into one export (WARM)",
        description="Check that the members share architecture, tokenizer, template, outputs and initialization, "
        "average their weights, and write one AutoModelForSequenceClassification folder whose card lists them.",
    )
    add_flags(p, MergeFlags)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.config.flags import settle

    args = settle(args, MergeFlags)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from rm.model.threads import set_threads
    from rm.scoring.weight_average import merge_models

    set_threads(0)
    out = merge_models(args.members, args.out, weights=args.weights, max_distance=args.max_distance,
                       evaluate=not args.no_eval, overwrite=args.overwrite, dtype=args.dtype)  # fmt: skip
    print(f"merged {len(args.members)} members into {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0
