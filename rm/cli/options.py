"""Options that several commands share: which reward model to load, how to batch it, how to read records."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rm.config.flags import option

DTYPES = ["float32", "bfloat16", "float16"]
FORMATS = ["auto", "hh", "prompt", "conversation", "argilla", "red-team"]


@dataclass
class ModelFlags:
    """Which reward model to load, how to batch it and fit texts to it: every command that scores."""

    model: str = option("", required=True)
    """reward model: an export folder, a run directory, a checkpoint or a Hub name (num_labels=1)"""
    batch_size: int = option(16)
    """texts (score) or pairs (eval) per batch"""
    max_length: int = option(0)
    """tokens per text (0: the run's collator.max_length, else the model's limit)"""
    dtype: str = option("float32", choices=DTYPES)
    """weights' dtype (bfloat16 halves the memory, on a GPU that has it)"""
    trust_remote_code: bool = option(False)
    """run code from the model's repository"""


@dataclass
class ThreadFlags:
    num_threads: int = option(0)
    """torch CPU threads, as training's train.num_threads (0: the cores this process may use, shared by the
    processes on the node)"""


@dataclass
class DataFlags:
    """How to read the records, as training's data.* keys: format, columns, chat template, any other data.* key."""

    format: str | None = option(None, choices=FORMATS)
    """record format, as data.format (unset: auto, told from each record's fields)"""
    columns: str = option("", metavar="FIELD=COLUMN,...")
    """source column of rm's fields, as data.columns: --columns chosen=response_j,rejected=response_k"""
    chat_template: str | None = option(None, choices=["auto", "tokenizer", "hh"])
    """render message lists with the model's chat template (auto: where it has one) or as HH text"""
    overrides: list[str] = option([], "--set", action="append", metavar="KEY=VALUE")
    """a data.* config key, repeatable: --set argilla.pairs_from_edits=true --set columns.chosen=good"""


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
