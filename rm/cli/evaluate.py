"""`python -m rm eval --model M --data D`: accuracy, calibration, length bias and, for groups of K responses, top-1,
best-of-K and Kendall tau per subset (evaluation/eval_report.py); with `--suite rewardbench|rewardbench2|rm-bench`,
also that leaderboard's own section scores and overall figure (rm/suites/suite_eval.py); with `--suite processbench`,
ProcessBench's first-error F1 of the model's step scores instead (rm/suites/steps/)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rm.cli.options import DataFlags, ModelFlags, ThreadFlags, data_config, subset_list
from rm.config.flags import add_flags, add_settings, option

if TYPE_CHECKING:  # the library is imported when a command runs, so that --help answers without it
    from rm.config import DataConfig

SUITES = ["rewardbench", "rewardbench2", "rm-bench", "processbench"]
"""rm/suites/catalog.py's SUITE_NAMES, spelled out so that --help answers without importing the library."""


@dataclass
class EvalFlags(ThreadFlags, DataFlags, ModelFlags):
    """`rm eval`'s options: the model's and the data's (rm/cli/options.py), then these."""

    model: list[str] = option([], required=True, nargs="+", action="extend")
    """reward model: an export folder, a run directory with an export, or a Hub name; several (--model A B C): an
    ensemble, each member scored as one model is and their rewards averaged per response (eval.json's top-level
    numbers are the mean's; its `ensemble` block has each member's, the conservative reward's and the uncertainty's)"""
    data: str | None = option(None)
    """pairs or groups: a file (.jsonl[.gz], .json[.gz], .csv[.gz], .parquet), an hh-rlhf-style directory or a
    Hub name (required without --suite; with it, default: the suite's Hub dataset)"""
    suite: str | None = option(None, choices=SUITES)
    """also compute this leaderboard's own aggregates (eval.json's `suite`) on its published layout: rewardbench
    (allenai/reward-bench), rewardbench2 (allenai/reward-bench-2), rm-bench (THU-KEG/RM-Bench); processbench
    (Qwen/ProcessBench) scores the model's steps alone: its first-error F1 (no pair table)"""
    prior_sets: str = option("", metavar="SOURCE")
    """with --suite rewardbench: RewardBench's prior preference sets (allenai/preference-test-sets, or a folder of
    its splits) for the optional Prior Sets figure"""
    out: str = option("runs/eval")
    """report directory"""
    split: str | None = option(None)
    """split to read from a directory or Hub dataset (unset: test; with --suite, the leaderboard's split)"""
    subsets: list[str] = option([], nargs="*")
    """subsets to load, by spaces or commas (default: all)"""
    eval_fraction: float = option(0.0, "--eval-fraction", "--holdout", metavar="FRACTION")
    """evaluate the held-out FRACTION of a seeded split of --split, as training's data.eval_fraction"""
    split_seed: int = option(0)
    """seed of that split, as training's data.split_seed"""
    on_bad_record: str = option("error", choices=["error", "skip"])
    """skip (and count) malformed records instead of stopping, as training's data.on_bad_record"""
    max_pairs: int = option(0)
    """a seeded sample of at most this many pairs (0: all), as training's data.max_eval_pairs"""
    bootstrap_samples: int = option(1000)
    """bootstrap resamples for the intervals"""
    seed: int = option(0)
    """bootstrap seed"""
    merged: str = option("", metavar="MODEL")
    """with several --model: a merged model of them (rm merge), scored beside them in eval.json's `ensemble`"""
    uncertainty_k: float = option(1.0)
    """with several --model: the conservative reward is the members' mean - K x their std (per response)"""


def add(sub) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a reward model on preference pairs or ranked groups: eval.json, report.md, report.html, plots",
        description="Score preference pairs (or groups of K ranked or rated responses) with a reward model and report "
        "accuracy, calibration and length bias per subset, and for groups top-1, best-of-K and Kendall tau, with "
        "intervals that resample prompts: eval.json, report.md, report.html and plots in --out. Options may also "
        "be given as key=value (data.KEY=VALUE: as --set KEY=VALUE).",
    )
    add_flags(p, EvalFlags)
    add_settings(p)
    p.set_defaults(func=run)


def settle_eval(args: argparse.Namespace) -> EvalFlags:
    """The options the flags and key=value overrides give; `data.KEY=VALUE` joins --set, as in a run config.
    `--model A B` and `--subsets a b` take every word after them, so a `key=value` there (no model or subset name
    has "=") is an override."""
    from dataclasses import replace

    from rm.config.flags import settle

    settings = [*(s for s in [*args.model, *args.subsets] if "=" in s), *args.settings]
    data = [s.removeprefix("data.") for s in settings if s.startswith("data.")]
    rest = [s for s in settings if not s.startswith("data.")]
    subsets = [s for s in args.subsets if "=" not in s]
    models = [m for m in args.model if "=" not in m]
    given = {**vars(args), "settings": rest, "subsets": subsets, "model": models}
    flags = settle(argparse.Namespace(**given), EvalFlags)
    return replace(flags, overrides=[*flags.overrides, *data])


def eval_data(args: argparse.Namespace | EvalFlags) -> DataConfig:
    """The DataConfig the flags describe: the data options (--format, --columns, --set ...) with --data as
    data.source, --subsets, --on-bad-record and the choice of pairs as training's keys. Without --eval-fraction
    the whole --split is scored (data.eval_split); with it (or its old name --holdout), the held-out FRACTION of
    --split, as a run whose data.train_split is that split holds out data.eval_fraction, by the rule that run used
    (data.split_version, unless --set names it); --max-pairs is data.max_eval_pairs. The flags win over --set for
    their keys."""
    from dataclasses import replace

    split = args.split or "test"
    cfg = replace(
        data_config(args),
        source=args.data,
        subsets=subset_list(args.subsets),
        split_seed=args.split_seed,
        max_eval_pairs=args.max_pairs,
        on_bad_record=args.on_bad_record,
    )
    if args.eval_fraction:
        said = any(o.split("=", 1)[0].strip() == "split_version" for o in args.overrides)
        first = args.model[0]  # an ensemble's members were trained on one split
        version = cfg.split_version if said else trained_split_version(first, cfg.split_version)
        return replace(cfg, train_split=split, eval_split="", eval_fraction=args.eval_fraction, split_version=version)
    return replace(cfg, eval_split=split)


def trained_split_version(model: str, default: int) -> int:
    """The hold-out rule the model's run used, so `--eval-fraction` picks that run's held-out pairs: its saved config's
    data.split_version (the config an export keeps, a run directory's config.yaml), 1 for a run trained before the
    key existed (it split by record), `default` for a model rm did not train."""
    from rm.config.exportdir import ExportDir
    from rm.config.loader import saved_split_version
    from rm.config.rundir import RunDir

    folder, run = ExportDir(model), RunDir(model)
    if folder.from_rm:
        return folder.split_version(default)
    return saved_split_version(run.config) if run.config.is_file() else default


def suite_data(args: argparse.Namespace | EvalFlags):
    """What `--suite` scores: --data (default: the suite's Hub dataset), --split (default: the leaderboard's),
    --subsets, --on-bad-record, --chat-template, --prior-sets. Options that choose or reshape pairs for a plain
    eval (--eval-fraction, --max-pairs, --format, --columns, --set) would change what the leaderboard scores:
    refused."""
    from rm.errors import ConfigError
    from rm.suites.suite_eval import SuiteData

    said = [flag for flag, value in (("--eval-fraction/--holdout", args.eval_fraction), ("--max-pairs", args.max_pairs),
            ("--format", args.format), ("--columns", args.columns), ("--set", args.overrides)) if value]  # fmt: skip
    if said:
        raise ConfigError(f"{', '.join(said)} cannot be used with --suite: a suite scores its published records as "
                          "they are")  # fmt: skip
    if args.prior_sets and args.suite != "rewardbench":
        raise ConfigError("--prior-sets goes with --suite rewardbench only")
    if args.chat_template and args.suite == "processbench":
        raise ConfigError("--chat-template does not apply to --suite processbench: a PRM reads the problem and its "
                          "steps as plain text, as rm trains one")  # fmt: skip
    return SuiteData(
        source=args.data or "",
        split=args.split or "",
        subsets=subset_list(args.subsets) or None,
        on_bad_record=args.on_bad_record,
        chat_template=args.chat_template or "auto",
        prior_sets=args.prior_sets,
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rm.errors import ConfigError
    from rm.evaluation.ensemble.ensemble_text import ensemble_lines
    from rm.evaluation.eval_report import EvalOptions, evaluate_model
    from rm.evaluation.report.markdown import format_table

    args = settle_eval(args)
    options = EvalOptions(batch_size=args.batch_size, max_length=args.max_length, samples=args.bootstrap_samples,
                          seed=args.seed, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                          num_threads=args.num_threads)  # fmt: skip
    several = len(args.model) > 1 or bool(args.merged)
    if args.suite:
        from rm.suites.suite_eval import evaluate_suite

        if several:
            raise ConfigError("--suite scores one model: give one --model (an ensemble is scored on --data)")
        data = suite_data(args)
        loaded = load_model(args, args.model[0])
        result = evaluate_suite(loaded.folder, args.suite, data, args.out, options, (loaded.model, loaded.tokenizer))
    elif not args.data:
        raise ConfigError("--data is required (or name a --suite, which reads its published dataset)")
    elif several:
        result = evaluate_several(args, options)
    else:
        data = eval_data(args)
        loaded = load_model(args, args.model[0])
        result = evaluate_model(loaded.folder, data, args.out, options, (loaded.model, loaded.tokenizer))
    if result and args.suite == "processbench":  # step scores: no pair table, no html page
        print_bench(result, args.out)
    elif result:  # the main process (the others return an empty result)
        skipped = result["eval"]["records_skipped"]
        if skipped:
            print(f"skipped {sum(skipped.values())} bad records {skipped} (listed in eval.json)")
        print(format_table(result))
        if result.get("ensemble"):
            print(ensemble_lines(result["ensemble"]))
        if args.suite:
            print(suite_table(result["suite"]))
            for note in result["suite"]["notes"]:  # how the score differs from the leaderboard's: not to be missed
                print(f"warning: {args.suite}: {note}", file=sys.stderr)
        print(f"report: {Path(args.out) / 'report.md'} and {Path(args.out) / 'report.html'} (one page to browse)")
    return 0


def evaluate_several(args: EvalFlags, options) -> dict:
    """`rm eval --model A B C [--merged M]`: the members (and the merged model) loaded, refused in one line where
    they do not read the same texts the same way (tokenizer, chat template and text rule, max_length, outputs:
    rm/scoring/members.py), then scored on --data (rm/evaluation/ensemble/ensemble_eval.py). Every member is held
    in memory, on the CPU; each goes to the device for its own scoring only."""
    import math

    from rm.errors import ConfigError
    from rm.evaluation.ensemble.ensemble_eval import evaluate_ensemble
    from rm.scoring.members import member_of, refuse_unshared

    if len(args.model) < 2:
        raise ConfigError("--merged is scored beside the ensemble of its members: give two or more --model")
    if not (math.isfinite(args.uncertainty_k) and args.uncertainty_k >= 0):
        raise ConfigError(f"--uncertainty-k must be a number >= 0 (mean - K x std), got {args.uncertainty_k}")
    data = eval_data(args)
    loaded = [load_model(args, name) for name in [*args.model, *([args.merged] if args.merged else [])]]
    refuse_unshared([member_of(m) for m in loaded], "rm eval", keys=("tokenizer", "template", "max_length", "outputs"))
    scored = [(m.folder, (m.model, m.tokenizer)) for m in loaded]
    merged = scored.pop() if args.merged else None
    return evaluate_ensemble(scored, data, args.out, options, merged=merged, k=args.uncertainty_k)


def print_bench(result: dict, out: str) -> None:
    """ProcessBench's console summary: skipped records, the table, each note as a warning, where the files are."""
    from pathlib import Path

    from rm.suites.steps.bench_block import bench_table

    skipped = result["eval"]["records_skipped"]
    if skipped:
        print(f"skipped {sum(skipped.values())} bad records {skipped} (listed in eval.json)")
    print(bench_table(result["suite"]))
    for note in result["suite"]["notes"]:
        print(f"warning: processbench: {note}", file=sys.stderr)
    print(f"report: {Path(out) / 'report.md'} (each item's step scores: {Path(out) / 'step_scores.jsonl'})")


def load_model(args: EvalFlags, name: str):
    """`name` (one --model) by the loader every command shares (rm/scoring/inference.py): an export folder, a Hub
    id, or a run directory with an export (its export/). A run without one is refused: eval.json's `eval.model` and
    the checks of a model's training data read the saved run config of the export (the loaded `folder`)."""
    from rm.errors import ModelError
    from rm.scoring import inference

    if inference.run_to_restore(name) is not None:
        raise ModelError(f"{name} is an rm run directory, not a model: export it first (python -m rm export {name} "
                         "--out DIR)")  # fmt: skip
    return inference.load(
        name,
        device="cpu",  # moved to this process's device once the process group is up
        dtype=args.dtype,
        max_length=args.max_length,
        trust_remote_code=args.trust_remote_code,
        num_threads=args.num_threads,
    )


def suite_table(suite: dict) -> str:
    """The suite's sections and overall figure, one per line (rm-bench: easy / normal / hard per domain), each beside
    what always picking the shortest and the longest answer scores by the suite's rule (rm/suites/suite_length.py)."""
    controls = suite.get("length_controls") or {}

    def beside(level: str, name: str = "") -> str:
        if not controls:
            return ""
        got = [(pick, c.get("score") if level == "score" else (c.get(level) or {}).get(name))
               for pick, c in controls.items()]  # fmt: skip
        if any(isinstance(v, dict) for _, v in got):  # rm-bench's domains: their average
            got = [(pick, (v or {}).get("average")) for pick, v in got]
        return " (" + ", ".join(f"{pick} answer {_num(v)}" for pick, v in got) + ")"

    lines = [f"{suite['name']}: score {_num(suite['score'])}{beside('score')}"]
    for name, value in suite["sections"].items():
        if isinstance(value, dict):
            value = "  ".join(f"{k} {_num(v)}" for k, v in value.items())
        else:
            value = _num(value)
        lines.append(f"  {name}: {value}{beside('sections', name)}")
    if suite.get("prior_sets") is not None:
        lines.append(f"  Prior Sets (outside the score): {_num(suite['prior_sets'])}")
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
