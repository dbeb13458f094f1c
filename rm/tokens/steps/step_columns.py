"""Stepwise groups' step positions and labels in an encoded split's Arrow columns (rm/tokens/store.py).

Three OPTIONAL columns, present only in a split of stepwise data: `step_counts` (list<int32>: per response, its
steps), `step_ends` (list<int32>: every response's step-end offsets, one after another) and `step_labels`
(list<float64>: their targets, in the same order). Flat lists, as `attributes` are, so that a group reads them
as numpy views, without a Python object per step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from rm.tokens.lengths import list_array

STEP_COLUMNS = {"step_counts": pa.list_(pa.int32()), "step_ends": pa.list_(pa.int32()),
                "step_labels": pa.list_(pa.float64())}  # fmt: skip
"""The columns, in their order after the other OPTIONAL ones."""


def step_arrays(groups: Sequence) -> list[pa.ListArray]:
    """The three columns of `groups` (EncodedGroups), each group's responses flattened in order."""
    counts, ends, labels = [], [], []
    for g in groups:
        counts.append(np.asarray([len(e) for e in g.step_ends], dtype=np.int32))
        ends.append(np.asarray([x for e in g.step_ends for x in e], dtype=np.int32))
        labels.append(np.asarray([x for e in g.step_labels for x in e], dtype=np.float64))
        if len(labels[-1]) not in (0, len(ends[-1])):
            raise ValueError(f"a group with {len(ends[-1])} step ends has {len(labels[-1])} step labels")
    columns = zip((counts, ends, labels), STEP_COLUMNS.values(), strict=True)
    return [list_array(values, None, kind.value_type) for values, kind in columns]


class StepViews:
    """Numpy views of a split's step columns, one set per record batch (as EncodedSplit keeps its batches)."""

    def __init__(self, batches: Sequence[pa.RecordBatch]):
        self.views = [[_view(b.column(name)) for name in STEP_COLUMNS] for b in batches]

    def of(self, b: int, j: int) -> tuple[list[list[int]], list[list[float]]]:
        """(step ends, step labels) per response of group j of record batch b."""
        (c_at, counts), (e_at, ends), (l_at, labels) = self.views[b]
        sizes = counts[c_at[j] : c_at[j + 1]]
        if not len(sizes):
            return [], []
        cuts = np.cumsum(sizes)[:-1]
        per_end = np.split(ends[e_at[j] : e_at[j + 1]], cuts)
        per_label = np.split(labels[l_at[j] : l_at[j + 1]], cuts) if l_at[j + 1] > l_at[j] else []
        return [e.tolist() for e in per_end], [x.tolist() for x in per_label]


def _view(column: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    return column.offsets.to_numpy(), column.values.to_numpy()


def stepwise_split(split: object) -> bool:
    """Whether an encoded split holds stepwise groups (its step columns)."""
    table = getattr(split, "table", None)
    return table is not None and "step_counts" in table.schema.names
