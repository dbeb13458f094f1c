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
    from rm.redteam import main
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

    errors: tuple[type[Exception], ...] = (ConfigError, DataError)
    if args.command != "train":
        from rm.score import ModelError

        errors += (ModelError,)
    try:
        return args.func(args)
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
