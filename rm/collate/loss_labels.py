"""The cached splits as the loss reads them: every decision that depends on the loss is made here, after the
tokenized-data cache, so that a change of `loss.type` or `loss.strength` reads the entry it already has.

- `loss.type: plackett_luce`: a group merged from pairwise records whose order has a cycle (its `cycle`
  column, rm/data/grouping.py) has no ranking to learn: a bad record, which stops the run or, with
  `data.on_bad_record: skip`, leaves the split and is counted, as a bad record found while loading does.
  Pairwise losses keep it as its given pairs.
- `loss.strength: soft`: a strength beyond a declared `loss.strength_max` is a bad record likewise; each pair's
  strength becomes its soft target p by rm/data/formats/strength.py's map (the `target` column), a pair with a
  strength is no hard tie (p = 0.5 already says as much), and the data report gets its `strength` note.
- `model.head.attributes`: the stored scores of every name the data has become those of the head's names, in its
  order (the `attributes` column; a run without attributes drops it). A name no response has stops the run; a
  score of a name the data spells otherwise than the head (`Helpfulness` for `helpfulness`, where the response
  has no `helpfulness`), or one outside `model.head.attribute_scales`, makes its group a bad record; the data
  report gets the `attributes` note (rm/data/formats/attributes.py).

Every process reads the same entry (or encodes the same data), so every process drops the same groups.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from rm.config import RunConfig
from rm.data.formats.attributes import attribute_notes, near
from rm.data.formats.strength import beyond_max, soft_note, soft_target, strength_scale
from rm.errors import DataError, RecordError
from rm.tokens.entry import Prepared
from rm.tokens.store import OPTIONAL, EncodedSplit, schema_with


def for_loss(cfg: RunConfig, data: Prepared) -> None:
    """`data`'s splits less the groups this loss and head cannot use (each one rejected in `data.report`), with
    the head's attribute scores and, under `loss.strength=soft`, soft targets."""
    head, found = cfg.model.head, data.report.notes.get("labels", {}).get("attributes", {"names": {}})
    stored = list(found["names"])  # the order encoding stored them in
    dropped = beyond = 0
    for split in ("train", "eval"):
        encoded: EncodedSplit = getattr(data, split)
        bad = screened(cfg, encoded, stored)
        for row, error in bad:
            data.report.reject(encoded.origin(row), error)  # raises in error mode: the run stops in one line
        if bad:
            setattr(data.encoding, split, encoded.without([row for row, _ in bad]))
        dropped, beyond = dropped + len(bad), beyond + sum(error.field == "strength" for _, error in bad)
    if head.attributes:
        missing_names(head.attributes, found)
        data.report.notes["attributes"] = attribute_notes(found, head.attributes, head.attribute_scales)
    data.encoding.train, data.encoding.eval = (
        with_attributes(s, stored, head.attributes) for s in (data.train, data.eval)
    )
    if cfg.loss.strength == "soft":
        counts = data.report.notes.get("labels", {}).get("strength", {"items": 0, "of": 0, "max_abs": 0.0})
        top = strength_scale(counts["items"], counts["max_abs"], cfg.loss.strength_max)
        data.encoding.train, data.encoding.eval = (with_targets(s, top) for s in (data.train, data.eval))
        soft = counts["items"] - beyond
        data.report.notes["strength"] = soft_note(top, cfg.loss.strength_max, soft, counts["of"] - dropped)


def screened(cfg: RunConfig, split: EncodedSplit, stored: list[str]) -> list[tuple[int, RecordError]]:
    """(row, why) of every group of `split` that is a bad record for this loss and head (`stored`: the names of
    the attribute scores the split holds)."""
    names, bad = split.table.schema.names, []
    if cfg.model.head.attributes and "attributes" in names:
        bad += attribute_screen(split, stored, cfg.model.head.attributes, cfg.model.head.attribute_scales)
    if cfg.loss.type == "plackett_luce" and "cycle" in names:
        for row, lines in enumerate(split.table.column("cycle").to_pylist()):
            if lines:
                message = (
                    f"fields 'chosen'/'rejected': the records at {lines} order this prompt's answers in a cycle, so "
                    "loss.type plackett_luce has no ranking to learn (pairwise keeps them as pairs)"
                )
                bad.append((row, RecordError("contradictory_order", message, "chosen")))
    declared = float(cfg.loss.strength_max)
    if cfg.loss.strength == "soft" and declared and "strength" in names:
        strength = split.table.column("strength").to_numpy()
        beyond = np.flatnonzero(np.abs(strength) > declared)
        bad += [(int(row), beyond_max(float(strength[row]), declared)) for row in beyond]
    first = {}
    for row, error in bad:  # a group's first reason
        first.setdefault(row, error)
    return sorted(first.items())


def with_targets(split: EncodedSplit, top: float) -> EncodedSplit:
    """`split` with a `target` column (p of each pair's strength, NaN for none) and each pair that has a strength
    ordered: rank (0, 0) becomes (0, 1), chosen first, as the record gives them."""
    table, names = split.table, split.table.schema.names
    strength = table.column("strength").to_numpy() if "strength" in names else np.full(len(split), math.nan)
    target = pa.array(soft_target(strength, top), pa.float64())  # NaN stays NaN: no strength, a hard label
    rank = table.column("rank").combine_chunks()
    offsets, values = rank.offsets.to_numpy(), rank.values.to_numpy().copy()
    pairs = offsets[:-1][~np.isnan(strength) & (np.diff(offsets) == 2)]  # where the rank of each pair with one starts
    values[pairs[(values[pairs] == 0) & (values[pairs + 1] == 0)] + 1] = 1
    ranks = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int32()))
    table = table.set_column(names.index("rank"), "rank", ranks)
    table = (
        table.append_column("target", target)
        if "target" not in names
        else table.set_column(names.index("target"), "target", target)
    )
    order = schema_with([n for n in OPTIONAL if n in table.schema.names], split.labels).names
    return EncodedSplit(table.select(order))


def scores_by_response(split: EncodedSplit, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores [responses, width], each response's row, the column's offsets) of the flat `attributes` column."""
    column = split.table.column("attributes").combine_chunks()
    offsets, values = column.offsets.to_numpy(), column.values.to_numpy()
    scores = values[offsets[0] : offsets[-1]].reshape(-1, width)
    return scores, np.repeat(np.arange(len(split)), np.diff(offsets) // width), offsets


def attribute_screen(
    split: EncodedSplit, stored: list[str], configured: list[str], scales: dict[str, list[float]]
) -> list[tuple[int, RecordError]]:
    """Groups with a score of a name misspelling a configured one (the response lacking the configured one), or
    a configured score outside its declared scale."""
    if not stored:
        return []
    scores, row_of, _ = scores_by_response(split, len(stored))
    bad: list[tuple[int, RecordError]] = []
    for name in configured:
        mine = scores[:, stored.index(name)] if name in stored else np.full(len(scores), math.nan)
        for key in (k for k in stored if k not in configured and near(k, name)):
            message = (
                f"field {key!r} is not in model.head.attributes; did you mean {name!r}, which this record lacks? "
                "(one of the two is misspelt: the record's key or the config's name)"
            )
            hits = ~np.isnan(scores[:, stored.index(key)]) & np.isnan(mine)
            bad += [(int(row), RecordError("misspelt_attribute", message, key)) for row in np.unique(row_of[hits])]
        if name in scales and name in stored:
            low, high = scales[name]
            for response in np.flatnonzero((mine < low) | (mine > high)):
                message = f"attribute {name!r} is {mine[response]:g}, outside model.head.attribute_scales.{name} "
                message += f"[{low:g}, {high:g}]"
                bad.append((int(row_of[response]), RecordError("out_of_range", message, name)))
    return bad


def with_attributes(split: EncodedSplit, stored: list[str], configured: list[str]) -> EncodedSplit:
    """`split` with the scores of the `configured` names in their order, or without the column for a run that
    names none (its batches then carry no `attributes`, as they never did)."""
    names = split.table.schema.names
    if "attributes" not in names:
        return split
    if not configured:
        return EncodedSplit(split.table.drop_columns(["attributes"]))
    scores, _, offsets = scores_by_response(split, len(stored))
    picked = np.ascontiguousarray(scores[:, [stored.index(n) for n in configured]]).ravel()
    starts = (offsets - offsets[0]) // len(stored) * len(configured)
    column = pa.ListArray.from_arrays(pa.array(starts), pa.array(picked))
    return EncodedSplit(split.table.set_column(names.index("attributes"), "attributes", column))


def missing_names(configured: list[str], found: dict, misspelt_later: bool = False) -> None:
    """Refuse, in one line, a configured attribute no response has a score of (`misspelt_later`: not one that a
    key of the data misspells, whose records the screen after the cache names)."""
    for name in configured:
        if name not in found["names"]:
            near_names = [k for k in found["names"] if near(k, name)]
            if near_names and misspelt_later:
                continue
            hint = f"; the data has {', '.join(map(repr, near_names))}" if near_names else ""
            raise DataError(
                f"model.head.attributes: {name!r} is scored in no record (read from rows' columns and 'attributes', "
                f"pairs' chosen_attributes/rejected_attributes, UltraFeedback completions and annotations){hint}"
            )
