"""`python -m rm score --model M --input FILE`: rewards for every record of a file (rm/evaluation/score_file.py).

M is what `rm serve` takes (rm/scoring/inference.py): an export folder, a run directory, a checkpoint or a Hub id."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from rm.cli.options import ModelFlags, ThreadFlags
from rm.config.flags import add_flags, add_settings, option


class OneOrSeveral(argparse.Action):
    """`--model A` stores "A", as every command's --model; `--model A B C` stores the list: an ensemble."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        values = [*([] if getattr(namespace, self.dest) in ("", None) else _listed(getattr(namespace, self.dest))),
                  *values]  # fmt: skip
        setattr(namespace, self.dest, values[0] if len(values) == 1 else values)


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


@dataclass
class ScoreFlags(ThreadFlags, ModelFlags):
    """`rm score`'s options: the model's (rm/cli/options.py), then these."""

    model: str | list[str] = option("", required=True, nargs="+", action=OneOrSeveral)
    """reward model: an export folder, a run directory, a checkpoint or a Hub name (num_labels=1); several (--model
    A B C): an ensemble, every text scored by each, `reward` the --ensemble-reward of theirs, with `reward_mean`,
    `reward_std`, `reward_conservative` and `reward_members` beside it"""

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
    ensemble_reward: str = option("mean", choices=["mean", "conservative", "min"])
    """with several --model, what `reward` holds: the members' mean, the conservative mean - K x std, or their min"""
    uncertainty_k: float = option(1.0)
    """with several --model, K of the conservative reward mean - K x std (std over the members, ddof 0)"""


def add(sub) -> None:
    p = sub.add_parser(
        "score",
        help="score conversations or transcripts in a file (.jsonl[.gz], .json, .csv, .parquet), streaming",
        description="Write the reward of each record of --input (transcripts, texts, prompt+response or "
        "chosen+rejected pairs) to a .jsonl file, streaming. A record of K responses to one prompt (UltraFeedback, "
        "Nectar, RewardBench 2, or prompt + responses: [{text}]) gets rewards: [...], one per response in its "
        "order, the prompt computed once. A stepwise record (prompt + solutions: [[step, ...]], prompt + "
        "completions: [step, ...], Math-Shepherd, PRM800K) gets step_scores: P(step correct) per step, null past "
        "max_length. One file holds one kind. Several --model (A B C) score as an ensemble: each reward field "
        "holds the --ensemble-reward of the members', with their mean, std, conservative reward and each member's "
        "beside it. Options may also be given as key=value.",
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

    words = _listed(args.model)  # `--model A B` takes every word after it: a key=value there is an override
    models = [w for w in words if "=" not in w or Path(w).expanduser().exists()]
    settings = [*(w for w in words if w not in models), *args.settings]
    given = {**vars(args), "model": models[0] if len(models) == 1 else models, "settings": settings}
    args = settle(argparse.Namespace(**given), ScoreFlags)
    out = args.out or scored_name(args.input)
    check_output(Path(args.input), Path(out), args.overwrite)  # before the model loads, not after
    if not isinstance(args.model, str):
        return score_ensemble(args, out)
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
        eos=loaded.eos,  # and how its responses ended (data.eos)
        wrap_job=lambda job: StepFileScoring(job, loaded.step_separator),  # stepwise records: step_scores
    )
    if counts.get("stepwise"):
        print(
            f"scored {counts['steps']} steps of {counts['solutions']} solutions in {counts['records']} records -> {out}"
        )
    else:
        print(f"scored {counts['texts']} texts in {counts['records']} records -> {out}")
    report(counts, max_length)
    return 0


def score_ensemble(args: ScoreFlags, out: str) -> int:
    """`rm score --model A B C`: the members loaded and checked as one ensemble (rm/scoring/ensemble_model.py),
    every window's texts scored by each in one batch plan, and each record given the chosen reward and the rest."""
    from rm.evaluation.score_file import score_file
    from rm.scoring.ensemble import RewardRecordsOnly, record_fields
    from rm.scoring.ensemble_model import ensemble_layout, load_ensemble

    ensemble = load_ensemble(
        args.model, dtype=args.dtype, max_length=args.max_length, trust_remote_code=args.trust_remote_code,
        num_threads=args.num_threads, k=args.uncertainty_k, reward=args.ensemble_reward,
    )  # fmt: skip
    first = ensemble.first
    counts = score_file(
        ensemble.model, first.tokenizer, args.input, out, batch_size=args.batch_size, max_length=first.max_length,
        field=args.field, on_bad_record=args.on_bad_record, overwrite=args.overwrite, text_version=first.text_version,
        eos=first.eos, layout=ensemble_layout(ensemble, prefix_cache=False)[0], wrap_job=RewardRecordsOnly,
        record_fields=record_fields(ensemble.rule),
    )  # fmt: skip
    print(
        f"scored {counts['texts']} texts in {counts['records']} records with an ensemble of {len(args.model)} "
        f"(reward: {args.ensemble_reward}) -> {out}"
    )
    report(counts, first.max_length)
    return 0


def report(counts: dict, max_length: int) -> None:
    """The lines every `rm score` prints after its first: what was skipped, not finite, unscored or cut."""
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


def scored_name(path: str) -> str:
    """runs/x.jsonl.gz (or x.csv, x.parquet) -> runs/x.scored.jsonl"""
    name = os.path.basename(path)
    for ext in (".gz", ".jsonl", ".json", ".csv", ".parquet"):
        name = name.removesuffix(ext)
    return os.path.join(os.path.dirname(path), name + ".scored.jsonl")
