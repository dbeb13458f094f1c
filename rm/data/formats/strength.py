"""Preference strength as soft labels: how much better chosen is, made the target of P(chosen > rejected).

Read only with `loss.strength=soft` (`ParseContext.strength`), so a run without it parses every record as before.
A pair's strength s comes from, in this order:

| records | s |
| --- | --- |
| any pairwise record (`hh`, `prompt`, `conversation`) | its `strength` field (chosen over rejected by s) |
| the same, with `chosen_score` and `rejected_score` | chosen_score - rejected_score |
| HelpSteer2-Preference (`response_1`, `response_2`, `preference_strength`) | abs(preference_strength) |
| Argilla exports rated on both sides | mean chosen rating - mean rejected rating |

HelpSteer2-Preference's `preference_strength` runs from -3 to 3, negative where response_1 is better (-3: much
better, 0: about the same, 3: response_2 much better, as its dataset card says): the better response is chosen
and s = abs(preference_strength); 0 gives the two responses in the file's order at s = 0.

After loading, `soft_targets` maps each strength to a target with `loss.strength_map` (linear):

    p = 0.5 + s / (2 max)        -max -> 0, 0 -> 0.5 (a tie by strength), +max -> 1

where max is `loss.strength_max`, or else the data's largest |s| (stated in the data report's `strength`). A
pair with a strength is never a hard tie (p = 0.5 is one already); pairs without one and K-response groups keep
their hard labels (NaN here), where `loss.ties` applies as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rm.data.formats.chat import messages_from
from rm.data.formats.group import score_of
from rm.data.formats.pair import Pair, ParseContext, check_responses, margin_of, subset_of, text_field, user_prompt
from rm.data.formats.ranked import rendered
from rm.errors import DataError, RecordError

HELPSTEER2_PREFERENCE = ("response_1", "response_2", "preference_strength")
"""The fields that make a record HelpSteer2-Preference's (nvidia/HelpSteer2, preference/)."""


def checked_strength(value: Any, field: str, ctx: ParseContext) -> float | None:
    """A strength as a float (None where missing), or the RecordError of a non-number or one beyond ±strength_max."""
    s = score_of(value, field)
    if s is not None and ctx.strength_max and abs(s) > ctx.strength_max:
        message = f"field {field!r} is {s:g}, beyond loss.strength_max {ctx.strength_max:g}"
        raise RecordError("out_of_range", message, field)
    return s


def pair_strength(record: dict, ctx: ParseContext) -> float | None:
    """A pairwise record's strength: its `strength`, else chosen_score - rejected_score, else None."""
    if record.get("strength") is not None:
        return checked_strength(record["strength"], "strength", ctx)
    chosen, rejected = (score_of(record.get(k), k) for k in ("chosen_score", "rejected_score"))
    if chosen is None or rejected is None:
        return None
    return checked_strength(chosen - rejected, "chosen_score - rejected_score", ctx)


def with_strength(pair: Pair, record: dict, ctx: ParseContext) -> Pair:
    """`pair` carrying its record's strength; a strength makes it an ordered pair (a soft 0.5, not a hard tie)."""
    pair.strength = pair_strength(record, ctx)
    pair.tie = pair.tie and pair.strength is None
    return pair


def parse_helpsteer2_preference(record: dict, origin: str, ctx: ParseContext) -> list[Pair]:
    """One pair, the better response chosen (see the module docstring for the sign)."""
    raw = record.get("prompt")
    prompt = messages_from(raw, "prompt") if isinstance(raw, list) else user_prompt(record, "prompt")
    first, second = text_field(record, "response_1"), text_field(record, "response_2")
    if record.get("preference_strength") is None:
        raise RecordError("missing_field", "field 'preference_strength' is missing", "preference_strength")
    signed = checked_strength(record["preference_strength"], "preference_strength", ctx)
    if signed is None:
        raise RecordError("not_a_number", "field 'preference_strength' must be a number", "preference_strength")
    text = rendered(prompt, [first, second], ["response_1", "response_2"], ctx.renderer)
    chosen, rejected = text.responses if signed <= 0 else text.responses[::-1]
    check_responses(chosen, rejected)
    tie = signed == 0 and not ctx.strength  # a hard tie; under soft labels s = 0 is p = 0.5
    subset, strength = subset_of(record, ctx.subset), abs(signed) if ctx.strength else None
    return [Pair(text.prompt, chosen, rejected, subset, margin_of(record), origin, text.turn_starts, tie=tie,
                 strength=strength)]  # fmt: skip


def soft_targets(items: Sequence[Any], declared_max: float) -> dict[str, Any]:
    """Set each item's `target` (p from its strength, NaN where it has none) and return the data report's note:
    the scale's max (declared, or the data's largest |s|), the map, and how many pairs are soft and hard."""
    strengths = [abs(s) for item in items if (s := getattr(item, "strength", None)) is not None]
    if not strengths:
        raise DataError(
            "loss.strength=soft: no pair has a strength (a record's 'strength', chosen_score/rejected_score, "
            "HelpSteer2-Preference's preference_strength, or Argilla ratings on both sides)"
        )
    top = float(declared_max) or max(strengths)
    if top == 0:
        raise DataError("loss.strength=soft: every strength in the data is 0; declare loss.strength_max")
    for item in items:
        s = getattr(item, "strength", None)
        item.target = math.nan if s is None else 0.5 + s / (2 * top)
    return {"max": top, "declared": bool(declared_max), "map": "linear", "soft": len(strengths)} | {
        "hard": len(items) - len(strengths)
    }
