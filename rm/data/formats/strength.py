"""Preference strength as soft labels: how much better chosen is, made the target of P(chosen > rejected).

Read from every record that has one, whatever the loss, so the tokenized data does not depend on it; only a run
with `loss.strength=soft` trains on it. A pair's strength s comes from, in this order:

| records | s |
| --- | --- |
| any pairwise record (`hh`, `prompt`, `conversation`) | its `strength` field (chosen over rejected by s) |
| the same, with `chosen_score` and `rejected_score` | chosen_score - rejected_score |
| HelpSteer2-Preference (`response_1`, `response_2`, `preference_strength`) | abs(preference_strength) |
| Argilla exports rated on both sides | mean chosen rating - mean rejected rating |

HelpSteer2-Preference's `preference_strength` runs from -3 to 3, negative where response_1 is better (-3: much
better, 0: about the same, 3: response_2 much better, as its dataset card says): the better response is chosen
and s = abs(preference_strength); 0 is a tie, the two responses in the file's order.

Under `loss.strength=soft` each strength maps to a target with `loss.strength_map` (linear, `soft_target`):

    p = 0.5 + s / (2 max)        -max -> 0, 0 -> 0.5 (a tie by strength), +max -> 1

where max is `loss.strength_max`, or else the data's largest |s| (stated in the data report's `strength`); a
strength beyond a declared max is a bad record. A pair with a strength is then never a hard tie (p = 0.5 is one
already); pairs without one and K-response groups keep their hard labels (NaN here), where `loss.ties` applies as
before. Training applies this to the cached splits (rm/collate/loss_labels.py), `rm eval` to the pairs it loads
(`soft_targets`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rm.data.data_report import DataReport
from rm.data.formats.chat import messages_from
from rm.data.formats.group import score_of
from rm.data.formats.pair import (
    MARGIN_MAX,
    MARGIN_WHY,
    Pair,
    ParseContext,
    check_responses,
    margin_of,
    subset_of,
    text_field,
    user_prompt,
)
from rm.data.formats.ranked import rendered
from rm.errors import DataError, RecordError

HELPSTEER2_PREFERENCE = ("response_1", "response_2", "preference_strength")
"""The fields that make a record HelpSteer2-Preference's (nvidia/HelpSteer2, preference/)."""


def pair_strength(record: dict) -> float | None:
    """A pairwise record's strength: its `strength`, else chosen_score - rejected_score, else None."""
    if record.get("strength") is not None:
        return score_of(record["strength"], "strength")
    chosen, rejected = (score_of(record.get(k), k) for k in ("chosen_score", "rejected_score"))
    if chosen is None or rejected is None:
        return None
    return score_of(chosen - rejected, "chosen_score - rejected_score", MARGIN_MAX, MARGIN_WHY)  # a margin's range


def with_strength(pair: Pair, record: dict) -> Pair:
    """`pair` carrying its record's strength (None where it has none)."""
    pair.strength = pair_strength(record)
    return pair


def soft_target(s: Any, top: float) -> Any:
    """The linear map's p of strength `s` (a float, or an array: NaN stays NaN) on a scale of max `top`: the one
    formula training and `rm eval` use."""
    return 0.5 + s / (2 * top)


def beyond_max(s: float, top: float) -> RecordError:
    """The bad record of a strength outside a declared `loss.strength_max`."""
    return RecordError("out_of_range", f"its strength {s:g} is beyond loss.strength_max {top:g}", "strength")


def strength_scale(n: int, max_abs: float, declared_max: float) -> float:
    """The soft labels' max: the declared one, else the data's largest |s|; refused where there is none."""
    if not n:
        raise DataError(
            "loss.strength=soft: no pair has a strength (a record's 'strength', chosen_score/rejected_score, "
            "HelpSteer2-Preference's preference_strength, or Argilla ratings on both sides)"
        )
    top = float(declared_max) or max_abs
    if top == 0:
        raise DataError("loss.strength=soft: every strength in the data is 0; declare loss.strength_max")
    return top


def strength_counts(items: Sequence[Any]) -> dict[str, Any]:
    """data_report.json's `labels.strength`: how many items have a strength, of how many, and the largest |s|."""
    strengths = [abs(s) for item in items if (s := getattr(item, "strength", None)) is not None]
    return {"items": len(strengths), "of": len(items), "max_abs": max(strengths, default=0.0)}


def parse_helpsteer2_preference(record: dict, origin: str, ctx: ParseContext) -> list[Pair]:
    """One pair, the better response chosen (see the module docstring for the sign)."""
    raw = record.get("prompt")
    prompt = messages_from(raw, "prompt") if isinstance(raw, list) else user_prompt(record, "prompt")
    first, second = text_field(record, "response_1"), text_field(record, "response_2")
    if record.get("preference_strength") is None:
        raise RecordError("missing_field", "field 'preference_strength' is missing", "preference_strength")
    signed = score_of(record["preference_strength"], "preference_strength")
    if signed is None:
        raise RecordError("not_a_number", "field 'preference_strength' must be a number", "preference_strength")
    text = rendered(prompt, [first, second], ["response_1", "response_2"], ctx.renderer)
    chosen, rejected = text.responses if signed <= 0 else text.responses[::-1]
    check_responses(chosen, rejected)
    tie = signed == 0  # a hard tie; under soft labels s = 0 is p = 0.5
    subset, strength = subset_of(record, ctx.subset), abs(signed)
    return [Pair(text.prompt, chosen, rejected, subset, margin=margin_of(record), origin=origin,
                 turn_starts=text.turn_starts, tie=tie, strength=strength)]  # fmt: skip


def soft_targets(items: list[Any], declared_max: float, report: DataReport) -> tuple[list[Any], dict[str, Any]]:
    """(the items, each pair with a strength untied with its `target` p, a strength beyond a declared max a bad
    record, left out in skip mode; the data report's note: the scale's max, the map, how many are soft and hard).
    Items without a strength get NaN: they keep their hard labels."""
    kept = []
    for item in items:
        s = getattr(item, "strength", None)
        if s is not None and declared_max and abs(s) > declared_max:
            report.reject(item.origin, beyond_max(s, declared_max))
            continue
        kept.append(item)
    counts = strength_counts(kept)
    top = strength_scale(counts["items"], counts["max_abs"], declared_max)
    for item in kept:
        s = getattr(item, "strength", None)
        item.target = math.nan if s is None else soft_target(s, top)
        item.tie = getattr(item, "tie", False) and s is None
    return kept, soft_note(top, declared_max, counts["items"], len(kept))


def soft_note(top: float, declared_max: float, soft: int, items: int) -> dict[str, Any]:
    return {"max": top, "declared": bool(declared_max), "map": "linear", "soft": soft, "hard": items - soft}
