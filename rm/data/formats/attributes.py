"""Per-response attribute scores (issue 26): the ratings a multi-attribute head regresses on, beside the order.

`model.head.attributes` names them; only then is anything read, so a run without attributes parses every
record exactly as before. Each response gets one value per configured name, in the config's order, NaN where
the record has no score for it ("N/A", null, or absent): a missing score is masked in the loss, not a bad
record. Where they come from:

| records | a response's scores |
| --- | --- |
| a row (HelpSteer2) | its columns of those names (`helpfulness` … `verbosity`), or `attributes: {name: value}` |
| a pair (`hh`, `prompt`, `conversation`) | `chosen_attributes` / `rejected_attributes: {name: value}` |
| `ultrafeedback` | a completion's field of that name (`fine-grained_score`), else `annotations[name].Rating` |
| `responses` | each response's `attributes: {name: value}` |

A score outside `model.head.attribute_scales[name]` is a bad record (file:line and field). After loading,
`attribute_notes` states each scale (declared, or the data's own [min, max]) and how many responses have
each score in the data report; a configured name that no response has is an error (a typo, most likely).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rm.data.formats.group import responses_of, score_of
from rm.errors import DataError, RecordError

NAN = float("nan")
Scores = tuple[float, ...]
"""One response's scores, one per configured attribute in order; NaN = missing."""


def scores_from(
    source: Any, names: Sequence[str], where: str, scales: Mapping[str, Sequence[float]]
) -> Scores:  # fmt: skip
    """The scores of `names` in the mapping `source` (None: none given), each checked against its scale.
    `where` is the field path of `source`, for messages ("chosen_attributes", "completions[2]")."""
    if source is None:
        return (NAN,) * len(names)
    if not isinstance(source, dict):
        raise RecordError("not_an_object", f"field {where!r} must be an object, got {type(source).__name__}", where)
    return tuple(checked(source.get(name), f"{where}.{name}" if where else name, name, scales) for name in names)


def checked(value: Any, field: str, name: str, scales: Mapping[str, Sequence[float]]) -> float:
    """One score as a float (NaN when missing), or the RecordError of a non-number or one outside its scale."""
    score = score_of(value, field)
    if score is None:
        return NAN
    scale = scales.get(name)
    if scale is not None and not scale[0] <= score <= scale[1]:
        message = f"field {field!r} is {score:g}, outside model.head.attribute_scales.{name} {list(scale)}"
        raise RecordError("out_of_range", message, field)
    return score


def row_scores(record: dict, names: Sequence[str], scales: Mapping[str, Sequence[float]]) -> Scores:
    """A row's scores: its own columns of those names (HelpSteer2's), else its `attributes` mapping."""
    nested = scores_from(record.get("attributes"), names, "attributes", scales)
    columns = tuple(checked(record.get(name), name, name, scales) for name in names)
    return tuple(c if not math.isnan(c) else n for c, n in zip(columns, nested, strict=True))


def pair_scores(record: dict, names: Sequence[str], scales: Mapping[str, Sequence[float]]) -> tuple[Scores, Scores]:
    """(chosen's, rejected's) scores from `chosen_attributes` and `rejected_attributes`."""
    return (
        scores_from(record.get("chosen_attributes"), names, "chosen_attributes", scales),
        scores_from(record.get("rejected_attributes"), names, "rejected_attributes", scales),
    )


def ultrafeedback_scores(
    completion: dict, names: Sequence[str], where: str, scales: Mapping[str, Sequence[float]]
) -> Scores:  # fmt: skip
    """A completion's own field of each name (`fine-grained_score`), else its annotation aspect's `Rating`."""
    annotations = completion.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    out = []
    for name in names:
        if name in completion:
            out.append(checked(completion[name], f"{where}.{name}", name, scales))
            continue
        aspect = annotations.get(name)
        rating = aspect.get("Rating") if isinstance(aspect, dict) else None
        out.append(checked(rating, f"{where}.annotations.{name}.Rating", name, scales))
    return tuple(out)


def attribute_notes(
    items: Sequence[Any], names: Sequence[str], declared: Mapping[str, Sequence[float]]
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Per attribute: its scale (declared, or inferred: the data's [min, max]) and how many responses have a
    score and how many miss it, for the data report; items read without scores (Nectar, Argilla) get NaN
    rows here, so every item of a run with attributes carries them. A name no response has is a DataError."""
    for item in items:
        if item.attributes is None:
            item.attributes = ((NAN,) * len(names),) * len(responses_of(item))
    rows = [row for item in items for row in item.attributes]
    notes = {}
    for i, name in enumerate(names):
        values = [row[i] for row in rows if not math.isnan(row[i])]
        if not values:
            raise DataError(
                f"model.head.attributes: {name!r} is scored in no record (read from rows' columns and 'attributes', "
                "pairs' chosen_attributes/rejected_attributes, UltraFeedback completions and annotations)"
            )
        scale = [float(v) for v in declared[name]] if name in declared else [min(values), max(values)]
        notes[name] = {"scale": scale, "declared": name in declared, "scored": len(values)}
        notes[name]["missing"] = len(rows) - len(values)
    return notes
