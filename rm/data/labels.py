"""What a record says about its responses beyond their order, declared once: the label schema.

A label is a value per group (a margin, a strength, a difficulty) or per response (a score, a token length). Its
declaration says where it comes from (`read` from the record, or `derive`d from the fitted token ids), and the rest
follows from its name, the one key it has everywhere:

    parsed     item.labels[name]            every format, after the format's own parser (`rm/data/formats/parse.py`)
    grouped    merged records keep a group value all of them agree on, per response the first given (grouping.py)
    cached     Arrow column `name`          float64 [groups], or list<float64> [responses]; NaN where missing
    batched    batch[name]                  float32 [groups], or [responses] in reward order (rm/collate/padded.py)
    trained    a `LossTerm` that `consumes` it (rm/model/objective.py); refused in one line before tokenizing when the
               data has no value of it
    gathered   eval's gathered columns      each group or response once across processes (rm/evaluation/gather.py)
    reported   data_report.json's `labels` (how many items carry it), and the eval.json blocks of the `Metric`s that
               read it (rm/evaluation/summary.py)

Registering one (`register`) from outside the package is all a new label takes; the tokenized-data cache key
covers every registered label (`fingerprint`), so data cached without it is never read as if it had it.

rm's own labels (`BUILTIN`: rank, scores, margin, ties, strength, attributes) are declared here too, with the
fields they come from, their columns, tensors, gathered columns and metrics; they keep code paths of their own,
since the loss reads them in ways one generic rule does not cover (a strength becomes a soft target by a scale the
whole data sets; a margin becomes per-pair). Loading reads every one of them whatever the loss and the head;
what those make of them is decided after the cache (rm/collate/loss_labels.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rm.errors import ConfigError, RecordError

Level = Literal["group", "response"]


@dataclass(frozen=True, kw_only=True)
class Label:
    """One label's declaration: its name (its key in items, columns, batches and gathered columns) and origin."""

    name: str
    level: Level
    """"group": one number per group (per pair); "response": one per response, in the group's response order."""
    fields: str
    """Where it is read from or how it is made, in words: the data report and the refusals name it."""
    read: Callable[[dict, Any], Any] | None = None
    """(record, parsed item) -> the value, or None where the record has none: a float for a group, one float per
    response of the item (`responses_of(item)` order: chosen, rejected for a pair) for a response label. A
    `RecordError` makes the record a bad one (stopped, or skipped and counted)."""
    derive: Callable[[Sequence[int], Sequence[Sequence[int]]], Any] | None = None
    """(prompt ids, response ids) -> the value, from the ids as fitted into collator.max_length, so a token length
    is the length trained on; computed for every group."""
    gather: bool = True
    """Gathered with the eval rewards, each value once across processes, for the metrics that read it."""
    version: int = 1
    """Part of the cache key: raise it when `read` or `derive` changes what it gives for the same data."""
    column: str = ""
    tensor: str = ""
    gathered: str = ""
    metrics: tuple[str, ...] = ()
    """For rm's own labels: their Arrow column, batch tensor, gathered eval column and eval.json blocks (a
    registered label's are its name, and the metrics that name it in `reads`)."""


RESERVED = {
    "prompt_ids", "response_ids", "rank", "subset_id", "index", "pairs", "prompt_id", "input_ids", "attention_mask",
    "position_ids", "prompt_lengths", "subset_ids", "pair_index", "better", "worse", "pair_group", "pair_margin",
    "tie_a", "tie_b", "tie_group", "response_group", "response_rank", "response_slot", "pair_target", "target",
    "reward", "group", "slot", "a", "b", "tie", "chosen", "rejected", "subset", "prompt", "labels",
}  # fmt: skip
"""Names of core columns, batch tensors and gathered columns: a label by one of these would overwrite them."""

BUILTIN = (
    Label(name="rank", level="response", fields="a pair's order (chosen first); K responses' scores or places; "
          "merged records' levels", column="rank, pairs", tensor="better, worse, response_rank", gathered="rank, a, b",
          metrics=("overall.accuracy", "overall.top1_accuracy", "overall.kendall_tau")),
    Label(name="scores", level="response", fields="UltraFeedback ratings or data.score_field; a row's score; "
          "a `responses` record's scores", column="scores", tensor="pair_margin (their difference)"),
    Label(name="margin", level="group", fields="a pair's `margin`; Argilla rating differences "
          "(data.argilla.margin_from_ratings)", column="margin", tensor="margin, pair_margin"),
    Label(name="tie", level="group", fields="`tie: true`, equal chosen_score/rejected_score, HelpSteer2-Preference 0",
          column="pairs, rank", tensor="tie_a, tie_b, tie_group", gathered="tie",
          metrics=("overall.tie_mean_abs_diff",)),
    Label(name="strength", level="group", fields="`strength`, chosen_score - rejected_score, HelpSteer2-Preference's "
          "preference_strength, Argilla ratings on both sides", column="strength, target", tensor="pair_target",
          gathered="target", metrics=("soft_calibration",)),
    Label(name="attributes", level="response", fields="chosen_/rejected_attributes, `attributes`, HelpSteer2 "
          "columns, UltraFeedback aspects, Argilla ratings", column="attributes", tensor="attributes",
          gathered="attribute_scores", metrics=("attributes",)),
)  # fmt: skip
"""rm's own labels, on their own code paths (rm/data/formats/{pair,group,strength,attributes}.py and their
readers); the README's table of them is these declarations (tests/data/test_labels.py)."""

_REGISTERED: dict[str, Label] = {}


def register(label: Label) -> Label:
    """Add `label` to what loading reads, encoding stores, collators batch and eval gathers; returns it.

    A name taken by another label, by rm's own or by a core column is refused (it would overwrite that one);
    registering the same declaration again (a module imported twice) is a no-op."""
    taken = _REGISTERED.get(label.name)
    if taken == label:
        return label
    if taken is not None or label.name in RESERVED or any(b.name == label.name for b in BUILTIN):
        raise ConfigError(f"label {label.name!r}: the name is taken; choose another")
    if (label.read is None) == (label.derive is None):
        raise ConfigError(f"label {label.name!r}: give exactly one of read (from the record) or derive (from the ids)")
    if not label.name.isidentifier():
        raise ConfigError(f"label {label.name!r}: a name is letters, digits and underscores")
    _REGISTERED[label.name] = label
    return label


def unregister(name: str) -> None:
    """Forget a registered label (tests, notebooks that redefine one)."""
    _REGISTERED.pop(name, None)


def registered() -> dict[str, Label]:
    """The registered labels by name, in registration order."""
    return dict(_REGISTERED)


def fingerprint() -> list[tuple[str, str, int]]:
    """What of the registered labels the tokenized-data cache key covers: (name, level, version), sorted; empty
    when none is registered, so such a run's key is the one it always had."""
    return sorted((label.name, label.level, label.version) for label in _REGISTERED.values())


def parsed_labels(record: dict, items: Sequence[Any]) -> None:
    """Each registered `read` label of `record` into its items' `labels` (a bad value is the record's RecordError)."""
    for label in _REGISTERED.values():
        if label.read is None:
            continue
        for item in items:
            value = label.read(record, item)
            if value is not None:
                item.labels = item.labels if isinstance(item.labels, dict) else {}  # its own, at the first label
                item.labels[label.name] = checked(label, value, item)


def checked(label: Label, value: Any, item: Any) -> float | tuple[float, ...]:
    """A read value as a float (group) or a tuple of one float per response, else the RecordError naming it."""
    k = len(item.responses) if hasattr(item, "responses") else 2 if hasattr(item, "chosen") else 1
    if label.level == "response" and k > 1:
        values = list(value) if isinstance(value, list | tuple) else None
        if values is None or len(values) != k:
            message = f"label {label.name!r} ({label.fields}) needs one number per response ({k}), got {value!r}"
            raise RecordError("bad_label", message, label.name)
        return tuple(_number(label, v) for v in values)
    return _number(label, value)


def _number(label: Label, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        message = f"label {label.name!r} ({label.fields}) must be a finite number, got {value!r}"
        raise RecordError("bad_label", message, label.name)
    return float(value)


def label_counts(items: Sequence[Any]) -> dict[str, dict]:
    """data_report.json's `labels`: per registered label read from records, how many items carry it and what from."""
    out = {}
    for label in _REGISTERED.values():
        if label.read is not None:
            n = sum(label.name in item.labels for item in items)
            out[label.name] = {"items": n, "of": len(items), "from": label.fields}
    return out
