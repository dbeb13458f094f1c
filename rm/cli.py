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
    on_eval = None
    if os.environ.get("RM_SWEEP_TRIAL_ID"):  # launched by `python -m rm sweep`: report evals to the study
        from rm.sweep_trial import reporter_from_env

        on_eval = reporter_from_env()
    from rm.train import main

    try:
        main(cfg, on_eval=on_eval)
    except Exception as e:
        if on_eval is None or type(e).__name__ != "TrialPruned":
            raise
        print(f"stopped: {e} (the sweep's pruner judged this trial weak)", file=sys.stderr)
        return 3
    return 0


def _sweep(args: argparse.Namespace) -> int:
    try:
        from rm.sweep import main
    except ImportError as e:
        print(f"error: sweeps need optuna ({e}): pip install 'rm-trainer[sweep]'", file=sys.stderr)
        return 2
    return main(args)


def _inspect(args: argparse.Namespace) -> int:
    from rm.inspect_data import main

    return main(args)


def _export(args: argparse.Namespace) -> int:
    import logging

    if (args.private or args.revision) and not args.push_to_hub:
        print("error: --private and --revision only apply with --push-to-hub REPO_ID", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from rm.hub import check_repo_id, push_folder
    from rm.restore import ExportError

    try:
        if args.push_to_hub:
            check_repo_id(args.push_to_hub)
        from rm.export import export_run

        out = export_run(
            args.source,
            args.out,
            normalize=args.normalize,
            evaluate=args.eval,
            model_id=args.push_to_hub or ".",
            overwrite=args.overwrite,
        )
        print(f"exported to {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
        if args.push_to_hub:
            print(f"pushed: {push_folder(out, args.push_to_hub, private=args.private, revision=args.revision)}")
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _eval(args: argparse.Namespace) -> int:
    from rm.report import main

    main(
        args.model,
        args.data,
        args.out,
        split=args.split,
        subsets=args.subsets,
        holdout=args.holdout,
        split_seed=args.split_seed,
        max_pairs=args.max_pairs,
        batch_size=args.batch_size,
        max_length=args.max_length,
        samples=args.bootstrap_samples,
        seed=args.seed,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
        on_bad_record=args.on_bad_record,
    )
    return 0


def _score(args: argparse.Namespace) -> int:
    from rm.score import default_max_length, load_reward_model, score_file

    out = args.out or _scored_name(args.input)
    model, tokenizer = load_reward_model(args.model, args.dtype, args.trust_remote_code, device="auto")
    max_length = args.max_length or default_max_length(args.model, model)
    counts = score_file(
        model, tokenizer, args.input, out, batch_size=args.batch_size, max_length=max_length, field=args.field
    )
    print(f"scored {counts['texts']} texts in {counts['records']} records -> {out}")
    if counts["records_truncated"]:
        print(f"{counts['records_truncated']} records had tokens cut from the left to fit max_length={max_length}")
    return 0


def _scored_name(path: str) -> str:
    """runs/x.jsonl.gz -> runs/x.scored.jsonl"""
    name = os.path.basename(path)
    for ext in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(ext)
    return os.path.join(os.path.dirname(path), name + ".scored.jsonl")


def _redteam(args: argparse.Namespace) -> int:
    if not args.scores and not (args.model and args.input):
        raise SystemExit("error: give --scores FILE, or --model and --input to score transcripts first")
    from rm.redteam_analysis import main
    from rm.score import default_max_length, load_reward_model

    kw = {}
    if not args.scores:
        model, tokenizer = load_reward_model(args.model, args.dtype, args.trust_remote_code, device="auto")
        max_length = args.max_length or default_max_length(args.model, model)
        kw = {"model": model, "tokenizer": tokenizer, "input": args.input, "batch_size": args.batch_size}
        kw |= {"max_length": max_length, "field": args.field}
    main(args.out, scores=args.scores, **kw)
    return 0


def _model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--model", required=required, help="reward model: local folder or Hub name (num_labels=1)")
    p.add_argument("--batch-size", type=int, default=16, help="texts (score) or pairs (eval) per batch")
    p.add_argument(
        "--max-length",
        type=int,
        default=0,
        help="tokens per text (default: the run's collator.max_length, else the model's limit)",
    )
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--trust-remote-code", action="store_true", help="run code from the model's repository")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a reward model from a YAML run config")
    train.add_argument("config", help="run config YAML, e.g. configs/quickstart.yaml")
    train.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.lr=1e-4")
    train.set_defaults(func=_train)

    sweep = sub.add_parser(
        "sweep",
        help="tune a run config's keys with Optuna: grid, random or TPE, pruning, restartable, many machines",
        description="Run the trials of a sweep YAML (configs/sweeps/), each a normal run under the sweep "
        "directory; rerun the same command to continue a stopped sweep.",
    )
    sweep.add_argument("config", help="sweep YAML, e.g. configs/sweeps/quickstart-lr.yaml")
    sweep.add_argument("overrides", nargs="*", metavar="key=value", help="sweep keys, e.g. n_trials=8 sampler=random")
    sweep.add_argument("--dry-run", action="store_true", help="print the commands of the trials; run nothing")
    sweep.add_argument("--storage", metavar="URL", help="Optuna storage URL shared by workers (default: the file's)")
    sweep.add_argument("--worker", action="store_true", help="join a study started elsewhere and run trials for it")
    sweep.add_argument("--report-only", action="store_true", help="write the results table, best.yaml and plot")
    sweep.set_defaults(func=_sweep)

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
    export = sub.add_parser(
        "export",
        help="write a run's final weights, or one checkpoint's, as a standard transformers reward model",
        description="Rebuild the model from the run's config.yaml and tokenizer, load the weights (LoRA merged), "
        "and write an AutoModelForSequenceClassification folder with a model card.",
    )
    export.add_argument("source", metavar="RUN_OR_CHECKPOINT_DIR", help="a run directory or <run>/checkpoints/step-N")
    export.add_argument("--out", required=True, metavar="DIR", help="folder to write (must be empty or absent)")
    export.add_argument("--push-to-hub", metavar="REPO_ID", help="then upload the folder (token: HF_TOKEN or login)")
    export.add_argument("--private", action="store_true", help="create the Hub repo private")
    export.add_argument("--revision", metavar="REV", help="Hub branch to push to (created if missing)")
    export.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="store the mean/std of rewards over the run's training pairs in config.json (default: export.normalize)",
    )
    export.add_argument("--eval", action="store_true", help="score the run's held-out pairs with these weights")
    export.add_argument("--overwrite", action="store_true", help="replace an earlier export in --out")
    export.set_defaults(func=_export)
    ev = sub.add_parser("eval", help="evaluate a reward model on preference pairs: eval.json, report.md, plots")
    _model_args(ev)
    ev.add_argument("--data", required=True, help="pairs: .jsonl[.gz] file, hh-rlhf-style directory or Hub name")
    ev.add_argument("--out", default="runs/eval", help="report directory (default: runs/eval)")
    ev.add_argument("--split", default="test", help="split to read from a directory or Hub dataset")
    ev.add_argument("--subsets", nargs="*", default=[], help="subsets to load (default: all)")
    ev.add_argument(
        "--holdout",
        type=float,
        default=0.0,
        help="evaluate the held-out FRACTION of a seeded split, as training's data.eval_fraction",
    )
    ev.add_argument("--split-seed", type=int, default=0, help="seed of that split (training's data.split_seed)")
    ev.add_argument(
        "--on-bad-record",
        choices=["error", "skip"],
        default="error",
        help="skip (and count) malformed records instead of stopping, as training's data.on_bad_record",
    )
    ev.add_argument("--max-pairs", type=int, default=0, help="a seeded sample of at most this many pairs")
    ev.add_argument("--bootstrap-samples", type=int, default=1000, help="bootstrap resamples for the intervals")
    ev.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    ev.set_defaults(func=_eval)

    sc = sub.add_parser("score", help="score conversations or transcripts in a JSON-lines file, streaming")
    _model_args(sc)
    sc.add_argument(
        "--input", required=True, help=".jsonl[.gz] with transcript, text, prompt+response or chosen+rejected"
    )
    sc.add_argument("--out", default="", help="output .jsonl[.gz] (default: INPUT.scored.jsonl beside the input)")
    sc.add_argument("--field", default="", help="score this text field instead of guessing")
    sc.set_defaults(func=_score)

    rt = sub.add_parser("redteam", help="Spearman correlation of rewards with red-team harm annotations, plot")
    _model_args(rt, required=False)
    rt.add_argument("--input", default="", help="red-team attempts .jsonl[.gz] to score with --model")
    rt.add_argument("--scores", default="", help="an already scored file (rm score output) instead")
    rt.add_argument("--out", default="runs/redteam", help="output directory (default: runs/redteam)")
    rt.add_argument("--field", default="transcript", help="text field to score (default: transcript)")
    rt.set_defaults(func=_redteam)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    from rm.config import ConfigError
    from rm.data import DataError
    from rm.faults import TrainingError

    errors: tuple[type[Exception], ...] = (ConfigError, DataError)
    if args.command != "train":
        from rm.score import ModelError

        errors += (ModelError,)
    try:
        return args.func(args)
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:  # a run that stopped (non-finite losses, out of memory) with what to change
        print(f"error: {e}", file=sys.stderr)
        return 1
