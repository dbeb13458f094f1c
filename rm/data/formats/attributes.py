"""Per-response attribute scores: the ratings a multi-attribute head regresses on, beside the order.

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

A score outside `model.head.attribute_scales[name]`, or beyond ±1e15 (ATTRIBUTE_MAX: the loss squares it), is
a bad record (file:line and field), as is a key that misspells a configured name (`Helpfulness`,
`helpfullness` where `helpfulness` is configured and absent), which would otherwise read as missing. After loading,
`attribute_notes` states each scale (declared, or the data's own [min, max]) and how many responses have
each score in the data report; a configured name that no response has is an error (a typo, most likely).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rm.data.formats.group import responses_of, score_of
from rm.data.formats.pair import ATTRIBUTE_MAX, ATTRIBUTE_WHY
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
    misspelt(source, names, where)
    return tuple(checked(source.get(name), f"{where}.{name}" if where else name, name, scales) for name in names)


def misspelt(source: Mapping[str, Any], names: Sequence[str], where: str, declared: Sequence[str] = ()) -> None:
    """The RecordError of a key of `source` that misspells a configured name the mapping lacks (`Helpfulness`,
    `helpfullness`): read as it stands, every such score would be counted missing and silently not trained.
    The config's name may be the misspelt one (every record then stops at its first), so the message says both.
    `declared` are more names the key may rightly be (a row's own fields)."""
    for name in names:
        if name in source:
            continue
        for key in source:
            if isinstance(key, str) and key not in names and key not in declared and near(key, name):
                field = f"{where}.{key}" if where else key
                message = (
                    f"field {field!r} is not in model.head.attributes; did you mean {name!r}, which this record "
                    "lacks? (one of the two is misspelt: the record's key or the config's name)"
                )
                raise RecordError("misspelt_attribute", message, field)


def near(key: str, name: str) -> bool:
    """Whether `key` reads as `name` mistyped: the same but for case and "-", "_" or " ", or an edit or two away
    (one edit for names of 4 to 7 letters, two from 8; shorter names only by case), counting a swap of two
    neighbouring letters as one edit (Damerau's optimal string alignment)."""
    a, b = (s.casefold().replace("-", "").replace("_", "").replace(" ", "") for s in (key, name))
    allowed = 0 if len(b) < 4 else 1 if len(b) < 8 else 2
    if a == b:
        return True
    if abs(len(a) - len(b)) > allowed:
        return False
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)] <= allowed


def checked(value: Any, field: str, name: str, scales: Mapping[str, Sequence[float]]) -> float:
    """One score as a float (NaN when missing), or the RecordError of a non-number, one beyond ATTRIBUTE_MAX or
    one outside its scale."""
    score = score_of(value, field, ATTRIBUTE_MAX, ATTRIBUTE_WHY)
    if score is None:
        return NAN
    scale = scales.get(name)
    if scale is not None and not scale[0] <= score <= scale[1]:
        message = f"field {field!r} is {score:g}, outside model.head.attribute_scales.{name} {list(scale)}"
        raise RecordError("out_of_range", message, field)
    return score


ROW_FIELDS = ("prompt", "response", "subset", "attributes")
"""A row's own fields, never a misspelt attribute column."""


def row_scores(record: dict, names: Sequence[str], scales: Mapping[str, Sequence[float]]) -> Scores:
    """A row's scores: its own columns of those names (HelpSteer2's), else its `attributes` mapping."""
    nested = scores_from(record.get("attributes"), names, "attributes", scales)
    columns = tuple(checked(record.get(name), name, name, scales) for name in names)
    missing = [n for n, c, v in zip(names, columns, nested, strict=True) if math.isnan(c) and math.isnan(v)]
    misspelt(record, missing, "", ROW_FIELDS + tuple(names))
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
    misspelt(annotations, [n for n in names if n not in completion], f"{where}.annotations", names)
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
