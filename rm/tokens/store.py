"""Encoded pairs kept in Arrow columns, not as Python lists: what a split of 160,000 pairs costs in memory.

One `EncodedPair` holding three `list[int]` costs about 36 bytes per token (an 8-byte pointer and a 28-byte
int object); an Arrow `list<int32>` column costs 4, and a memory-mapped one costs nothing until read and is
shared by every process that maps the same file (issue 12: 2.3 GiB peak on 160,000 + 8,000 HH pairs).

`EncodedSplit` is a read-only `Sequence[EncodedPair]` over a `pyarrow.Table` of `SCHEMA`. Indexing it gives an
`EncodedPair` whose id fields are numpy int32 views into the table's buffers (no copy); the lengths that
batch planning needs come as whole numpy arrays, so a plan never builds one object per pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import pyarrow as pa

from rm.errors import DataError

IDS = ("prompt_ids", "chosen_ids", "rejected_ids")
SCHEMA = pa.schema(
    [
        ("prompt_ids", pa.list_(pa.int32())),
        ("chosen_ids", pa.list_(pa.int32())),
        ("rejected_ids", pa.list_(pa.int32())),
        ("subset_id", pa.int32()),
        ("margin", pa.float64()),
        ("index", pa.int64()),
    ]
)
"""The columns of an encoded split (an Arrow cache file holds exactly these)."""

TokenIds = Sequence[int] | np.ndarray
"""A list of ids (tests, probes, benchmarks) or an int32 view into an `EncodedSplit`: collators take both."""


@dataclass
class EncodedPair:
    prompt_ids: TokenIds
    chosen_ids: TokenIds
    rejected_ids: TokenIds
    subset_id: int
    margin: float = 0.0
    index: int = -1
    """Position in the encoded split: lets multi-process eval count each pair exactly once."""


def join_ids(*parts: TokenIds) -> np.ndarray:
    """The id sequences one after another, as int64. Never `a + b`: on numpy views that adds elementwise."""
    return np.concatenate([np.asarray(p, dtype=np.int64).reshape(-1) for p in parts])


def same_ids(a: TokenIds, b: TokenIds) -> bool:
    """Equal id sequences, whether lists or arrays (`==` on arrays compares elementwise)."""
    return len(a) == len(b) and bool(np.array_equal(np.asarray(a), np.asarray(b)))


def record_batch(pairs: Iterable[EncodedPair]) -> pa.RecordBatch:
    """One record batch of `SCHEMA` from pairs (lists or arrays), without a Python list per token."""
    pairs = list(pairs)
    columns = []
    for name in IDS:
        seqs = [np.asarray(getattr(p, name), dtype=np.int32).reshape(-1) for p in pairs]
        offsets = np.zeros(len(seqs) + 1, dtype=np.int32)
        np.cumsum([len(s) for s in seqs], out=offsets[1:])
        values = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int32)
        columns.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.int32())))
    columns.append(pa.array([p.subset_id for p in pairs], type=pa.int32()))
    columns.append(pa.array([float(p.margin) for p in pairs], type=pa.float64()))
    columns.append(pa.array([p.index for p in pairs], type=pa.int64()))
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


class EncodedSplit(Sequence[EncodedPair]):
    """A split's encoded pairs over an Arrow table of `SCHEMA`, e.g. memory-mapped from a cache file.

    The table's record batches are kept as they are (no `combine_chunks`, which would copy a memory-mapped
    file into this process's memory): `_starts` says where each batch begins, and pair i is read from its
    batch's flat `values` between two `offsets`.
    """

    def __init__(self, table: pa.Table):
        if not table.schema.equals(SCHEMA):
            raise DataError(f"encoded pairs need the columns {SCHEMA.names} typed as {SCHEMA}; got {table.schema}")
        nulls = [name for name in SCHEMA.names if table.column(name).null_count]
        if nulls:
            raise DataError(f"encoded pairs have missing values in column(s) {', '.join(nulls)}")
        self.table = table
        # to_batches() aligns every column on the same row ranges (zero-copy slices); empty ones add nothing.
        batches = [b for b in table.to_batches() if b.num_rows]
        self._starts = np.cumsum([0] + [b.num_rows for b in batches[:-1]], dtype=np.int64)
        # Per batch and id column: (offsets, values), numpy views of the Arrow buffers. A sliced ListArray's
        # offsets already point into its unsliced `values`, so the pair is values[offsets[j]:offsets[j + 1]].
        self._ids = [
            [(b.column(name).offsets.to_numpy(), b.column(name).values.to_numpy()) for name in IDS] for b in batches
        ]
        self._subset = table.column("subset_id").to_numpy()
        self._margin = table.column("margin").to_numpy()
        self._index = table.column("index").to_numpy()

    @classmethod
    def from_table(cls, table: pa.Table) -> EncodedSplit:
        return cls(table)

    @classmethod
    def from_batches(cls, batches: list[pa.RecordBatch]) -> EncodedSplit:
        return cls(pa.Table.from_batches(batches, schema=SCHEMA))

    @classmethod
    def from_pairs(cls, pairs: Iterable[EncodedPair]) -> EncodedSplit:
        """From pairs held as lists (tests, small sets): one record batch."""
        return cls.from_batches([record_batch(pairs)])

    def __len__(self) -> int:
        return self.table.num_rows

    def __reduce__(self):  # pickled (a spawned data-loader worker) as the table alone: the views are rebuilt
        return EncodedSplit, (self.table,)

    @overload
    def __getitem__(self, i: int) -> EncodedPair: ...

    @overload
    def __getitem__(self, i: slice) -> list[EncodedPair]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair {i} of an encoded split of {len(self)}")
        i %= len(self)
        b = int(np.searchsorted(self._starts, i, side="right")) - 1
        j = i - int(self._starts[b])
        ids = [values[offsets[j] : offsets[j + 1]] for offsets, values in self._ids[b]]
        return EncodedPair(*ids, int(self._subset[i]), float(self._margin[i]), int(self._index[i]))

    def lengths(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prompt, chosen, rejected) token counts of every pair, each an int64 array [pairs]."""
        return tuple(  # type: ignore[return-value]
            np.concatenate([np.diff(ids[k][0]).astype(np.int64) for ids in self._ids] or [np.zeros(0, np.int64)])
            for k in range(len(IDS))
        )

    def __repr__(self) -> str:
        return f"EncodedSplit({len(self)} pairs, {self.table.nbytes / 2**20:.1f} MiB)"


def id_lengths(pairs: Sequence[EncodedPair]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt, chosen, rejected) token counts of every pair: from the Arrow offsets of an `EncodedSplit`,
    one pass over the pairs of a plain list."""
    if isinstance(pairs, EncodedSplit):
        return pairs.lengths()
    counts = np.array([[len(p.prompt_ids), len(p.chosen_ids), len(p.rejected_ids)] for p in pairs], dtype=np.int64)
    counts = counts.reshape(-1, 3)
    return counts[:, 0].copy(), counts[:, 1].copy(), counts[:, 2].copy()
