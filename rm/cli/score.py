"""`python -m rm score --model M --input FILE`: rewards for every record of a file (rm/evaluation/score_file.py).

M is what `rm serve` takes (rm/scoring/inference.py): an export folder, a run directory, a checkpoint or a Hub id."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from rm.cli.options import ModelFlags, ThreadFlags
from rm.config.flags import add_flags, add_settings, option


@dataclass
class ScoreFlags(ThreadFlags, ModelFlags):
    """`rm score`'s options: the model's (rm/cli/options.py), then these."""

    input: str = option("", required=True)
    """.jsonl[.gz], .json, .csv or .parquet with transcript, text, prompt+response, chosen+rejected (text or
    message lists), K responses to a prompt, or stepwise solutions (prompt + solutions or completions,
    Math-Shepherd, PRM800K: step_scores)"""
    out: str = option("")
    """output .jsonl[.gz] (unset: INPUT.scored.jsonl beside the input)"""
    field: str = option("")
    """score this text field instead of guessing"""
    on_bad_record: str = option("error", choices=["error", "skip"])
    """skip (and count) records that cannot be scored instead of stopping at the first one, as training's
    data.on_bad_record"""
    overwrite: bool = option(False)
    """replace an existing --out file"""


def add(sub) -> None:
    p = sub.add_parser(
        "score",
        help="score conversations or transcripts in a file (.jsonl[.gz], .json, .csv, .parquet), streaming",
        description="Write the reward of each record of --input (transcripts, texts, prompt+response or "
        "chosen+rejected pairs) to a .jsonl file, streaming. A record of K responses to one prompt (UltraFeedback, "
        "Nectar, RewardBench 2, or prompt + responses: [{text}]) gets rewards: [...], one per response in its "
        "order, the prompt computed once. A stepwise record (prompt + solutions: [[step, ...]], prompt + "
        "completions: [step, ...], Math-Shepherd, PRM800K) gets step_scores: P(step correct) per step, null past "
        "max_length. One file holds one kind. Options may also be given as key=value.",
    )
    add_flags(p, ScoreFlags)
    add_settings(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rm.config.flags import settle
    from rm.evaluation.score_file import check_output, score_file
    from rm.scoring import load
    from rm.scoring.step_file import StepFileScoring

    args = settle(args, ScoreFlags)
    out = args.out or scored_name(args.input)
    check_output(Path(args.input), Path(out), args.overwrite)  # before the model loads, not after
    loaded = load(
        args.model,
        dtype=args.dtype,
        max_length=args.max_length,
        trust_remote_code=args.trust_remote_code,
        num_threads=args.num_threads,
    )
    max_length = loaded.max_length
    counts = score_file(
        loaded.model,
        loaded.tokenizer,
        args.input,
        out,
        batch_size=args.batch_size,
        max_length=max_length,
        field=args.field,
        on_bad_record=args.on_bad_record,
        overwrite=args.overwrite,
        text_version=loaded.text_version,  # the rule its training read records by
        wrap_job=lambda job: StepFileScoring(job, loaded.step_separator),  # stepwise records: step_scores
    )
    if counts.get("stepwise"):
        print(
            f"scored {counts['steps']} steps of {counts['solutions']} solutions in {counts['records']} records -> {out}"
        )
    else:
        print(f"scored {counts['texts']} texts in {counts['records']} records -> {out}")
    if counts.get("skipped"):
        first = ", ".join(counts["skipped_origins"][:3])
        print(f"skipped {sum(counts['skipped'].values())} bad records {counts['skipped']} (first: {first})")
    if counts.get("rewards_nonfinite"):  # written as null; the rest of the file stands (rc 0)
        first = ", ".join(counts["nonfinite_origins"][:3])
        n, records = counts["rewards_nonfinite"], len(counts["nonfinite_origins"])
        print(
            f"warning: {n} rewards in {records} records are not finite (NaN or infinite: the model overflows), "
            f"written as null (first: {first})",
            file=sys.stderr,
        )
    if counts.get("steps_unscored"):
        first = ", ".join(counts["unscored_origins"][:3])
        n, records = counts["steps_unscored"], len(counts["unscored_origins"])
        print(
            f"{n} steps in {records} records have no score (null): past max_length={max_length}, or not finite "
            f"(first: {first})"
        )
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
