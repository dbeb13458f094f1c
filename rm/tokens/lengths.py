"""Token counts of encoded groups as numpy arrays: all that batch planning reads (rm/collate/planner.py), from an
`EncodedSplit`'s Arrow offsets (rm/tokens/store.py) or one pass over a list of groups."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

INT32 = pa.int32()


@dataclass
class GroupLengths:
    """Token counts of every group as numpy arrays, all that batch planning reads: `prompt` [groups], `responses`
    [responses] group after group, `starts` [groups + 1] (group g's are `responses[starts[g]:starts[g + 1]]`)."""

    prompt: np.ndarray
    responses: np.ndarray
    starts: np.ndarray

    @property
    def segment(self) -> np.ndarray:
        """[groups]: tokens of each group with its prompt once (its segment in the shared layout)."""
        return self.prompt + np.add.reduceat(self.responses, self.starts[:-1]) if len(self.prompt) else self.prompt

    @property
    def widest(self) -> np.ndarray:
        """[groups]: prompt + the longest response (the widest row of the group in the padded layout)."""
        return self.prompt + np.maximum.reduceat(self.responses, self.starts[:-1]) if len(self.prompt) else self.prompt

    @functools.cached_property
    def one_size(self) -> int:
        """The response count every group has (2 for pairs), or 0 when sizes differ: found once, since the
        planner asks `sequences` for every group it tries to add to a micro-batch."""
        counts = np.diff(self.starts)
        return int(counts[0]) if len(counts) and (counts == counts[0]).all() else 0

    def sequences(self, groups: np.ndarray) -> np.ndarray:
        """Prompt + response of every response of `groups` (the packed layout's sequences), flat."""
        if self.one_size:  # every group of one size (pairs): no loop over groups
            return (self.prompt[groups, None] + self.responses.reshape(-1, self.one_size)[groups]).ravel()
        return np.concatenate(
            [self.prompt[g] + self.responses[self.starts[g] : self.starts[g + 1]] for g in groups.tolist()]
            or [np.zeros(0, np.int64)]
        )


def lengths_of(prompt: list[np.ndarray], counts: list[np.ndarray], responses: list[np.ndarray]) -> GroupLengths:
    empty = np.zeros(0, np.int64)
    counts_all = np.concatenate(counts or [empty])
    starts = np.zeros(len(counts_all) + 1, dtype=np.int64)
    np.cumsum(counts_all, out=starts[1:])
    return GroupLengths(np.concatenate(prompt or [empty]), np.concatenate(responses or [empty]), starts)


def id_lengths(groups: Sequence[Any]) -> GroupLengths:
    """Token counts of every group: from the Arrow offsets of an `EncodedSplit`, one pass over a plain list."""
    if hasattr(groups, "lengths"):  # an EncodedSplit
        return groups.lengths()
    prompt = np.array([len(g.prompt_ids) for g in groups], dtype=np.int64)
    counts = np.array([len(g.response_ids) for g in groups], dtype=np.int64)
    responses = np.array([len(r) for g in groups for r in g.response_ids], dtype=np.int64)
    return lengths_of([prompt], [counts], [responses])


def list_array(seqs: list[np.ndarray], inner: pa.Array | None = None, kind: pa.DataType = INT32) -> pa.ListArray:
    """A ListArray of `seqs` (arrays of `kind`), or of `inner`'s elements `len(seqs[i])` at a time: the offsets are
    the lengths' running sum."""
    offsets = np.zeros(len(seqs) + 1, dtype=np.int32)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    if inner is None:
        inner = pa.array(np.concatenate(seqs) if seqs else np.zeros(0, dtype=kind.to_pandas_dtype()), type=kind)
    return pa.ListArray.from_arrays(pa.array(offsets), inner)
