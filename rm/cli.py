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
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    from rm.config import ConfigError
    from rm.data import DataError
    from rm.faults import TrainingError

    try:
        return args.func(args)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:  # a run that stopped (non-finite losses, out of memory) with what to change
        print(f"error: {e}", file=sys.stderr)
        return 1
