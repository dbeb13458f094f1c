"""Options that several commands share: which reward model to load and how to batch it."""

from __future__ import annotations

import argparse


def add_model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
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
