"""ProcessBench's records (Qwen/ProcessBench; Zheng et al. 2024, arXiv 2412.06559): one step-by-step solution of a
math problem each, with the index of its earliest erroneous step.

The published dataset has four splits, one per source of problems (gsm8k, math, olympiadbench, omnimath); a record
is `id`, `generator` (the model that wrote the solution), `problem`, `steps` (the solution's paragraphs in order),
`final_answer_correct` and `label` (the index of the earliest erroneous step, -1 when every step is correct). No
record names its split, so an item's split is the split it was read from:

- the Hub dataset (the default source) or a downloaded folder (`hf download --repo-type dataset Qwen/ProcessBench
  --local-dir DIR` lays out `<split>.json`, one JSON array per split; `<split>.jsonl` or `data/<split>-*.parquet`
  are read too): each split asked for (`subsets`, else `split`, else all four), read as its own;
- a file: one split, named by `split`, else by the file's name (`gsm8k.json` holds gsm8k).

The problem is read as rm trains a PRM on it (rm/data/steps/): plain text, no chat template. A step is kept as
written, even an empty one: `label` indexes the steps, so dropping one would move the error it points at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rm.data.data_report import DataReport
from rm.data.formats.pair import string_of, text_field
from rm.errors import ConfigError, DataError, RecordError
from rm.suites.records import parse_items, read_records
from rm.suites.subset_names import near_miss

NAME = "processbench"
HUB = "Qwen/ProcessBench"
SPLITS = ("gsm8k", "math", "olympiadbench", "omnimath")
"""The published splits, in the paper's order: the ones its average F1 is taken over."""


@dataclass(frozen=True)
class BenchItem:
    """One solution of the benchmark."""

    split: str
    problem: str
    steps: tuple[str, ...]
    label: int
    """Index of the earliest erroneous step; -1 when every step is correct."""
    origin: str
    id: str = ""
    generator: str = ""
    final_answer_correct: bool | None = None
    """Kept for step_scores.jsonl; the metric does not read it (a solution can reach the right answer through a
    wrong step, which is what the benchmark is about). None when the record has no such field."""


def steps_of(record: dict) -> tuple[str, ...]:
    """The record's `steps`: a non-empty list of strings (a Parquet or Hub row gives a list too)."""
    value = record.get("steps")
    if not isinstance(value, list | tuple) or not value:
        got = "missing" if value is None else f"{type(value).__name__} {value!r}"[:80]
        raise RecordError("not_a_list", f"field 'steps' must be a non-empty list of step texts, got {got}", "steps")
    return tuple(string_of(s, f"steps[{k}]") for k, s in enumerate(value))


def label_of(record: dict, steps: int) -> int:
    """The record's `label`: an integer, -1 or the index of one of its `steps` steps."""
    value = record.get("label")
    if isinstance(value, bool) or not isinstance(value, int):  # a bool is an int to Python, not a step index
        got = "missing" if value is None else f"{type(value).__name__} {value!r}"[:80]
        raise RecordError("bad_label", f"field 'label' must be -1 or a step index, got {got}", "label")
    if not -1 <= value < steps:
        raise RecordError("bad_label", f"field 'label' is {value}: not -1 or a step index of {steps} steps", "label")
    return value


def parse(record: dict, origin: str, split: str) -> BenchItem:
    steps = steps_of(record)
    correct = record.get("final_answer_correct")
    if correct is not None and not isinstance(correct, bool):
        message = f"field 'final_answer_correct' must be true or false, got {type(correct).__name__} {correct!r}"
        raise RecordError("bad_field", message[:160], "final_answer_correct")
    named = {k: "" if record.get(k) is None else str(record[k]) for k in ("id", "generator")}
    return BenchItem(split, text_field(record, "problem"), steps, label_of(record, len(steps)), origin,
                     named["id"], named["generator"], correct)  # fmt: skip


def split_names(source: str, split: str, subsets: Sequence[str] | None) -> list[str]:
    """The splits to read from `source` (see the module's docstring)."""
    if split and subsets:
        raise ConfigError(f"{NAME}: give the splits to read as --subsets or one as --split, not both")
    path = Path(source).expanduser()
    if path.is_file():
        name = split or path.name.split(".")[0]
        if subsets and name not in subsets:
            raise DataError(f"{source}: holds split {name!r} (named {'by --split' if split else 'by the file'}), "
                            f"not {', '.join(map(repr, subsets))}")  # fmt: skip
        return [name]
    return list(dict.fromkeys(subsets or ([split] if split else SPLITS)))


def load_bench(source: str, split: str, subsets: Sequence[str] | None, report: DataReport) -> list[BenchItem]:
    """The items of `source` (default: the Hub dataset), split after split; a bad record stops the load, or is
    skipped and counted in `report`'s skip mode."""
    source = source or HUB
    items: list[BenchItem] = []
    for name in split_names(source, split, subsets):
        try:
            records = list(read_records(source, name, report))
        except DataError as e:
            guess = near_miss(name, SPLITS)
            hint = f" (did you mean {guess!r}?)" if guess and guess != name else ""
            raise DataError(f"{e}{hint}") from None
        # parse_items hands each parser a renderer, which a plain-text problem does not use
        items += parse_items(iter(records), lambda record, origin, _, s=name: parse(record, origin, s), None, report)
    if not items:
        raise DataError(f"{source}: no {NAME} records to score (skipped: {report.skipped_counts() or 'none'})")
    return items
