"""Options that several commands share: which reward model to load and how to batch it."""

from __future__ import annotations

import argparse


def add_model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--model", required=required, help="reward model: local folder or Hub name (num_labels=1)")
    p.add_argument("--batch-size", type=int, default=16, help="texts (score) or pairs (eval) per batch")
    add_loading_args(p)


def add_loading_args(p: argparse.ArgumentParser) -> None:
    """How a reward model is loaded and fitted to: every command that scores (score, eval, serve)."""
    p.add_argument(
        "--max-length",
        type=int,
        default=0,
        help="tokens per text (default: the run's collator.max_length, else the model's limit)",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16"],
        help="weights' dtype (default: float32; bfloat16 halves the memory, on a GPU that has it)",
    )
    p.add_argument("--trust-remote-code", action="store_true", help="run code from the model's repository")


def add_data_args(p: argparse.ArgumentParser) -> None:
    """How to read the records, as training's data.* keys: format, columns, chat template, Argilla options."""
    p.add_argument(
        "--format",
        choices=["auto", "hh", "prompt", "conversation", "argilla", "red-team"],
        help="record format, as data.format (default auto: told from each record's fields)",
    )
    p.add_argument(
        "--columns",
        default="",
        metavar="FIELD=COLUMN,...",
        help="source column of rm's fields, as data.columns: --columns chosen=response_j,rejected=response_k",
    )
    p.add_argument(
        "--chat-template",
        choices=["auto", "tokenizer", "hh"],
        help="render message lists with the model's chat template (auto: where it has one) or as HH text",
    )
    add_set_option(p)


def add_set_option(p: argparse.ArgumentParser) -> None:
    """`--set KEY=VALUE`, repeatable: any data.* config key (what `data inspect` and `eval` share)."""
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a data.* config key, repeatable: --set argilla.pairs_from_edits=true --set columns.chosen=good",
    )


def data_config(args: argparse.Namespace):
    """The DataConfig the data options describe (a bad key or value fails naming it, as in a run config)."""
    from rm.config import load_config

    overrides = [f"data.{o}" for o in args.overrides]
    for item in filter(None, args.columns.split(",")):
        overrides.append(f"data.columns.{item.strip()}")
    if args.format:
        overrides.append(f"data.format={args.format}")
    if args.chat_template:
        overrides.append(f"data.chat_template={args.chat_template}")
    return load_config(None, overrides).data


def subset_list(values: list[str] | str) -> list[str]:
    """--subsets a b, --subsets a,b and --subsets "a, b" all mean [a, b]."""
    values = [values] if isinstance(values, str) else values
    return [s.strip() for v in values for s in v.replace(",", " ").split() if s.strip()]
