"""`python -m rm redteam`: Spearman correlation of rewards with red-team harm ratings (redteam_analysis.py)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from rm.cli.options import ModelFlags
from rm.config.flags import add_flags, add_settings, option


@dataclass
class RedteamFlags(ModelFlags):
    """`rm redteam`'s options: the model's (rm/cli/options.py), --model optional, then these."""

    model: str = option("")
    """reward model to score --input with: an export, a run directory, a checkpoint or a Hub name (num_labels=1)"""
    input: str = option("")
    """red-team attempts .jsonl[.gz] to score with --model"""
    scores: str = option("")
    """an already scored file (rm score output) instead"""
    out: str = option("runs/redteam")
    """output directory"""
    field: str = option("transcript")
    """text field to score"""


def add(sub) -> None:
    p = sub.add_parser(
        "redteam",
        help="Spearman correlation of rewards with red-team harm annotations, plot",
        description="Score Anthropic's red-team attempts with --model (or read an rm score output with --scores) "
        "and report how the rewards correlate with the annotators' harm ratings: redteam.json and redteam.png. "
        "Options may also be given as key=value.",
    )
    add_flags(p, RedteamFlags)
    add_settings(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.config.flags import settle

    args = settle(args, RedteamFlags)
    if not args.scores and not (args.model and args.input):
        print("error: give --scores FILE, or --model and --input to score transcripts first", file=sys.stderr)
        return 2
    from rm.evaluation.redteam_analysis import format_table, run_redteam
    from rm.scoring import load

    kw = {}
    if not args.scores:
        loaded = load(
            args.model, dtype=args.dtype, max_length=args.max_length, trust_remote_code=args.trust_remote_code
        )
        kw = {"model": loaded.model, "tokenizer": loaded.tokenizer, "input": args.input, "batch_size": args.batch_size}
        kw |= {"max_length": loaded.max_length, "field": args.field}
    result = run_redteam(args.out, scores=args.scores, **kw)
    if "scored" in result:
        n, cut = result["scored"]["records"], result["scored"]["records_truncated"]
        print(f"scored {n} transcripts ({cut} cut to fit) -> {result['scores']}")
    print(format_table(result))
    print(f"written: {Path(args.out) / 'redteam.json'}, {Path(args.out) / 'redteam.png'}")
    return 0
