"""`python -m rm score --model M --input FILE`: rewards for every record of a file (rm/evaluation/score_file.py)."""

from __future__ import annotations

import argparse
import os

from rm.cli.options import add_model_args


def add(sub) -> None:
    p = sub.add_parser("score", help="score conversations or transcripts in a JSON-lines file, streaming")
    add_model_args(p)
    p.add_argument(
        "--input",
        required=True,
        help=".jsonl[.gz], .json, .csv or .parquet with transcript, text, prompt+response or chosen+rejected "
        "(text or message lists)",
    )
    p.add_argument("--out", default="", help="output .jsonl[.gz] (default: INPUT.scored.jsonl beside the input)")
    p.add_argument("--field", default="", help="score this text field instead of guessing")
    p.add_argument(
        "--on-bad-record",
        choices=["error", "skip"],
        default="error",
        help="skip (and count) records that cannot be scored instead of stopping at the first one",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.evaluation.score_file import score_file
    from rm.model.pretrained import default_max_length, load_reward_model

    out = args.out or scored_name(args.input)
    model, tokenizer = load_reward_model(args.model, args.dtype, args.trust_remote_code, device="auto")
    max_length = args.max_length or default_max_length(args.model, model)
    counts = score_file(
        model,
        tokenizer,
        args.input,
        out,
        batch_size=args.batch_size,
        max_length=max_length,
        field=args.field,
        on_bad_record=args.on_bad_record,
    )
    print(f"scored {counts['texts']} texts in {counts['records']} records -> {out}")
    if counts.get("skipped"):
        first = ", ".join(counts["skipped_origins"][:3])
        print(f"skipped {sum(counts['skipped'].values())} bad records {counts['skipped']} (first: {first})")
    if counts["records_truncated"]:
        n = counts["records_truncated"]
        print(f"{n} records were cut to fit max_length={max_length} (a prompt's oldest turns go first)")
    return 0


def scored_name(path: str) -> str:
    """runs/x.jsonl.gz (or x.csv, x.parquet) -> runs/x.scored.jsonl"""
    name = os.path.basename(path)
    for ext in (".gz", ".jsonl", ".json", ".csv", ".parquet"):
        name = name.removesuffix(ext)
    return os.path.join(os.path.dirname(path), name + ".scored.jsonl")
