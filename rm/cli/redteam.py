"""`python -m rm redteam`: Spearman correlation of rewards with red-team harm ratings (redteam_analysis.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rm.cli.options import add_model_args


def add(sub) -> None:
    p = sub.add_parser(
        "redteam",
        help="Spearman correlation of rewards with red-team harm annotations, plot",
        description="Score Anthropic's red-team attempts with --model (or read an rm score output with --scores) "
        "and report how the rewards correlate with the annotators' harm ratings: redteam.json and redteam.png.",
    )
    add_model_args(p, required=False)
    p.add_argument("--input", default="", help="red-team attempts .jsonl[.gz] to score with --model")
    p.add_argument("--scores", default="", help="an already scored file (rm score output) instead")
    p.add_argument("--out", default="runs/redteam", help="output directory (default: runs/redteam)")
    p.add_argument("--field", default="transcript", help="text field to score (default: transcript)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.scores and not (args.model and args.input):
        print("error: give --scores FILE, or --model and --input to score transcripts first", file=sys.stderr)
        return 2
    from rm.evaluation.redteam_analysis import format_table, run_redteam
    from rm.model.pretrained import default_max_length, load_reward_model

    kw = {}
    if not args.scores:
        model, tokenizer = load_reward_model(args.model, args.dtype, args.trust_remote_code, device="auto")
        max_length = args.max_length or default_max_length(args.model, model)
        kw = {"model": model, "tokenizer": tokenizer, "input": args.input, "batch_size": args.batch_size}
        kw |= {"max_length": max_length, "field": args.field}
    result = run_redteam(args.out, scores=args.scores, **kw)
    if "scored" in result:
        n, cut = result["scored"]["records"], result["scored"]["records_truncated"]
        print(f"scored {n} transcripts ({cut} cut to fit) -> {result['scores']}")
    print(format_table(result))
    print(f"written: {Path(args.out) / 'redteam.json'}, {Path(args.out) / 'redteam.png'}")
    return 0
