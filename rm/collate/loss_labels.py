"""The cached splits as the loss reads them: every decision that depends on the loss is made here, after the
tokenized-data cache, so that a change of `loss.type` or `loss.strength` reads the entry it already has.

- `loss.type: plackett_luce`: a group merged from pairwise records whose order has a cycle (its `cycle`
  column, rm/data/grouping.py) has no ranking to learn: a bad record, which stops the run or, with
  `data.on_bad_record: skip`, leaves the split and is counted, as a bad record found while loading does.
  Pairwise losses keep it as its given pairs.
- `loss.strength: soft`: a strength beyond a declared `loss.strength_max` is a bad record likewise; each pair's
  strength becomes its soft target p by rm/data/formats/strength.py's map (the `target` column), a pair with a
  strength is no hard tie (p = 0.5 already says as much), and the data report gets its `strength` note.

Every process reads the same entry (or encodes the same data), so every process drops the same groups.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from rm.config import RunConfig
from rm.data.formats.strength import beyond_max, soft_note, soft_target, strength_scale
from rm.errors import RecordError
from rm.tokens.entry import Prepared
from rm.tokens.store import OPTIONAL, EncodedSplit, schema_with


def for_loss(cfg: RunConfig, data: Prepared) -> None:
    """`data`'s splits less the groups this loss cannot use (each one rejected in `data.report`), with soft targets
    under `loss.strength=soft`."""
    dropped = 0
    for split in ("train", "eval"):
        encoded: EncodedSplit = getattr(data, split)
        bad = screened(cfg, encoded)
        for row, error in bad:
            data.report.reject(encoded.origin(row), error)  # raises in error mode: the run stops in one line
        if bad:
            encoded = encoded.without([row for row, _ in bad])
        dropped += len(bad)
        setattr(data.encoding, split, encoded)
    if cfg.loss.strength == "soft":
        counts = data.report.notes.get("labels", {}).get("strength", {"items": 0, "of": 0, "max_abs": 0.0})
        top = strength_scale(counts["items"], counts["max_abs"], cfg.loss.strength_max)
        data.encoding.train, data.encoding.eval = (with_targets(s, top) for s in (data.train, data.eval))
        soft = counts["items"] - (dropped if cfg.loss.strength_max else 0)
        data.report.notes["strength"] = soft_note(top, cfg.loss.strength_max, soft, counts["of"] - dropped)


def screened(cfg: RunConfig, split: EncodedSplit) -> list[tuple[int, RecordError]]:
    """(row, why) of every group of `split` that is a bad record for this loss."""
    names, bad = split.table.schema.names, []
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
    return sorted(bad, key=lambda b: b[0])


def with_targets(split: EncodedSplit, top: float) -> EncodedSplit:
    """`split` with a `target` column (p of each pair's strength, NaN for none) and each pair that has a strength
    ordered: rank (0, 0) becomes (0, 1), chosen first, as the record gives them."""
    table, names = split.table, split.table.schema.names
    strength = table.column("strength").to_numpy() if "strength" in names else np.full(len(split), math.nan)
    target = pa.array([soft_target(s, top) if not math.isnan(s) else math.nan for s in strength.tolist()], pa.float64())
    rank = table.column("rank").combine_chunks()
    offsets, values = rank.offsets.to_numpy(), rank.values.to_numpy().copy()
    start = offsets[:-1]
    tied = ~np.isnan(strength) & (np.diff(offsets) == 2)
    tied &= (values[np.minimum(start, len(values) - 1)] == 0) & (values[np.minimum(start + 1, len(values) - 1)] == 0)
    values[start[tied] + 1] = 1
    ranks = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int32()))
    table = table.set_column(names.index("rank"), "rank", ranks)
    table = (
        table.append_column("target", target)
        if "target" not in names
        else table.set_column(names.index("target"), "target", target)
    )
    order = schema_with([n for n in OPTIONAL if n in table.schema.names], split.labels).names
    return EncodedSplit(table.select(order))
