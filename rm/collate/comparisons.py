"""What a group compares: every pair of its responses ordered by rank, or the explicit pairs it was given.

Collators turn these into the loss's index tensors (rm/collate/padded.py:group_fields) and training weighs a
group in its optimizer step by how many there are (rm/model/objective.py:step_weight), so both read one rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rm.tokens.store import EncodedGroup, EncodedSplit


def compared(rank: Sequence[int], pairs: Sequence[int]) -> list[tuple[int, int, bool]]:
    """(a, b, tie) of a group with these ranks and flat explicit `pairs` (a, b, tie triples; empty: every pair of
    responses, the better first, and every pair of equal rank as a tie, a before b)."""
    if len(pairs):
        flat = [int(x) for x in pairs]
        return [(flat[i], flat[i + 1], bool(flat[i + 2])) for i in range(0, len(flat), 3)]
    k = len(rank)
    out = [(a, b, False) for a in range(k) for b in range(k) if rank[a] < rank[b]]
    return out + [(a, b, True) for a in range(k) for b in range(a + 1, k) if rank[a] == rank[b]]


def comparisons(g: EncodedGroup) -> list[tuple[int, int, bool]]:
    return compared(g.rank, g.pairs)


def comparison_counts(groups: Sequence[EncodedGroup]) -> tuple[np.ndarray, np.ndarray]:
    """(strict, tied) comparisons of every group, [groups] each, read from the Arrow columns of an encoded split
    rather than group objects (160,000 of them take seconds to build)."""
    if isinstance(groups, EncodedSplit):
        ranks, explicit = groups.table.column("rank").to_pylist(), groups.table.column("pairs").to_pylist()
    else:
        ranks, explicit = [list(g.rank) for g in groups], [list(g.pairs) for g in groups]
    strict, tied = np.zeros(len(ranks), np.int64), np.zeros(len(ranks), np.int64)
    for i, (rank, flat) in enumerate(zip(ranks, explicit, strict=True)):
        found = compared(rank, flat)
        tied[i] = sum(tie for _, _, tie in found)
        strict[i] = len(found) - tied[i]
    return strict, tied
