"""Token-budget planning shared by training, `rm eval`, `rm score`, the suites and `rm serve`.

Every planner of rm cuts sequences or groups into batches by their token counts; the rules they share live here
so that each is written once: length chunks whose padding stays within a slack of their tokens.
"""

from __future__ import annotations

SLACK = 1.2
"""A chunk grows while its padded size stays within this factor of its tokens (sequences sorted by length)."""


def chunks(lengths: list[int], slack: float = SLACK) -> list[list[int]]:
    """Indices of `lengths` sorted by length and cut where padding to the chunk's longest would pass `slack`."""
    out: list[list[int]] = []
    tokens = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if out and (len(out[-1]) + 1) * lengths[i] <= slack * (tokens + lengths[i]):
            out[-1].append(i)
            tokens += lengths[i]
        else:
            out.append([i])
            tokens = lengths[i]
    return out
