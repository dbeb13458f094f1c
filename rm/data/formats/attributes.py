"""Per-response attribute scores: the ratings a multi-attribute head regresses on, beside the order.

Loading reads every attribute the data has, whatever the head, so that the tokenized data does not depend on it:
each response gets {name: score} of the names its record gives ("N/A", null or absent: missing, masked in the
loss). Where they come from:

| records | a response's scores |
| --- | --- |
| a row (HelpSteer2) | its `attributes: {name: value}`, its ratings (`helpfulness` …), any JSON-number column |
| a pair (`hh`, `prompt`, `conversation`, `argilla`) | `chosen_attributes` / `rejected_attributes: {name: value}` |
| `argilla` | also `rating`: the mean of the submitted annotators' ratings |
| `ultrafeedback` | each annotation aspect's `Rating`, and a completion's own number fields (`fine-grained_score`) |
| `responses` | each response's `attributes: {name: value}` |

A score that is no number, or beyond ±1e15 (ATTRIBUTE_MAX: the loss squares it), is a bad record (file:line and
field). The data report's `labels.attributes` (`attribute_counts`) lists the names found with how many responses
have each, their [min, max] and the first record that gives them; encoding stores every name's scores, in that
sorted order (`attribute_names`). A run with `model.head.attributes` then takes its names' scores after the cache
(rm/collate/loss_labels.py): a name no response has, or one the data spells otherwise (`Helpfulness`,
`helpfullness` where `helpfulness` is configured), stops it in one line, a score outside
`model.head.attribute_scales` is a bad record, and `attribute_notes` states each scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rm.data.formats.group import responses_of, score_of
from rm.data.formats.pair import ATTRIBUTE_MAX, ATTRIBUTE_WHY
from rm.errors import RecordError

NAN = float("nan")
Scores = dict[str, float]
"""One response's scores by attribute name; a name it lacks is missing."""


def scores_from(source: Any, where: str) -> Scores:
    """Every score of the mapping `source` (None: none given). `where` is its field path, for messages
    ("chosen_attributes", "responses[2].attributes")."""
    if source is None:
        return {}
    if not isinstance(source, dict):
        raise RecordError("not_an_object", f"field {where!r} must be an object, got {type(source).__name__}", where)
    out = {}
    for key, value in source.items():
        if (v := checked(value, f"{where}.{key}" if where else str(key))) is not None:
            out[str(key)] = v
    return out


def checked(value: Any, field: str) -> float | None:
    """One score as a float (None when missing), or the RecordError of a non-number or one beyond ATTRIBUTE_MAX."""
    return score_of(value, field, ATTRIBUTE_MAX, ATTRIBUTE_WHY)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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


ROW_FIELDS = ("prompt", "response", "subset", "attributes")
"""A row's own fields, never an attribute column."""


def row_scores(record: dict, columns: Sequence[str]) -> Scores:
    """A row's scores: its `attributes` mapping's, and over them its rating `columns` (HelpSteer2's, numbers or
    strings holding one, as CSV cells are) and any other column holding a JSON number."""
    out = scores_from(record.get("attributes"), "attributes")
    for key, value in record.items():
        if key not in ROW_FIELDS and (key in columns or is_number(value)) and (v := checked(value, key)) is not None:
            out[key] = v
    return out


def pair_scores(record: dict) -> tuple[Scores, Scores]:
    """(chosen's, rejected's) scores from `chosen_attributes` and `rejected_attributes`."""
    return scores_from(record.get("chosen_attributes"), "chosen_attributes"), scores_from(
        record.get("rejected_attributes"), "rejected_attributes"
    )


def ultrafeedback_scores(completion: dict, where: str) -> Scores:
    """Each annotation aspect's `Rating`, and over them the completion's own number fields (`fine-grained_score`)."""
    annotations = completion.get("annotations")
    out = {}
    for name, aspect in (annotations if isinstance(annotations, dict) else {}).items():
        rating = aspect.get("Rating") if isinstance(aspect, dict) else None
        if (v := checked(rating, f"{where}.annotations.{name}.Rating")) is not None:
            out[str(name)] = v
    for key, value in completion.items():
        if is_number(value) and (v := checked(value, f"{where}.{key}")) is not None:
            out[str(key)] = v
    return out


def attribute_counts(items: Sequence[Any]) -> dict[str, Any]:
    """The data report's `labels.attributes`: the names found (sorted: the order encoding stores them in), and per
    name how many responses have a score, its [min, max] and the first record that gives it."""
    names: dict[str, dict[str, Any]] = {}
    given = responses = 0
    for item in items:
        if item.attributes is None:
            responses += 2 if hasattr(item, "chosen") else len(item.responses)  # no tuple made per pair
            continue
        responses += len(responses_of(item))
        given += 1
        for scores in item.attributes:
            for name, v in scores.items():
                seen = names.setdefault(name, {"scored": 0, "min": v, "max": v, "first": item.origin})
                seen["scored"] += 1
                seen["min"], seen["max"] = min(seen["min"], v), max(seen["max"], v)
    return {"items": given, "of": len(items), "responses": responses, "names": dict(sorted(names.items()))}


def attribute_names(report: Any) -> list[str]:
    """The attribute names a loaded split's report found, in the order encoding stores their scores."""
    return list(report.notes.get("labels", {}).get("attributes", {}).get("names", {}))


def attribute_notes(found: dict[str, Any], names: Sequence[str], declared: Mapping[str, Sequence[float]]) -> dict:
    """Per configured attribute (`found`: `attribute_counts`' names): its scale (declared, or inferred: the data's
    [min, max]) and how many responses have a score and how many miss it, for the data report."""
    notes = {}
    for name in names:
        seen = found["names"][name]
        scale = [float(v) for v in declared[name]] if name in declared else [seen["min"], seen["max"]]
        notes[name] = {"scale": scale, "declared": name in declared, "scored": seen["scored"]}
        notes[name]["missing"] = found["responses"] - seen["scored"]
    return notes
