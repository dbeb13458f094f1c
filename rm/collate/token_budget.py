"""Batch planning by token counts: every planner of rm cuts sequences or groups into batches with the rules here.

Who calls what:
- training's micro-batches, `rm.collate.planner.PairBatches` (`rm train`): within a token budget, `fill` over
  windows sorted widest first; the shared and packed layouts' rows counted by `Rows` (`planner.shared_cost`,
  `planner.SharedFill`). `rm eval` plans with the same class, a fixed count of pairs in order.
- the packed collators' rows (`rm.collate.pack.pack`, training, `rm eval`, `rm score`): `plan_rows`.
- `rm score`, `rm redteam`, the suites and `rm.load(...).score` (a fixed count of responses,
  `rm.collate.scoring.batches`): `scoring_order`, then `count_batches`, which never cuts a group that fits a batch.
- `rm serve`'s batcher (`rm.serve.batch_plan.cut`, continuous batching within a token budget): `fill`, with
  `batch_plan.Fill`, whose shared-layout rows are `Rows`.
- the cached-prompt forward (`rm.model.cached_prompt`, `rm serve`): `chunks`, length chunks within a padding slack.

`Rows` is the one first-fit packer: the plan, the collator that lays its rows out and the server's budget must
count the same rows, or a micro-batch planned within budget is laid out wider (tests/meta/test_first_fit.py fails
on a second first-fit loop in rm/).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from rm.tokens.store import EncodedGroup

T = TypeVar("T")

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


class Rows:
    """Rows of `width` token slots filled first-fit: a length goes into the first row with room for it, else it
    opens a row. Lengths fed longest first make this first-fit decreasing, which needs at most 11/9 of the
    fewest rows plus 6/9 (Dósa 2007); every caller here feeds them longest first."""

    def __init__(self, width: int):
        self.width = width
        self.free: list[int] = []
        """Free slots of each row, in the order the rows opened."""

    @property
    def count(self) -> int:
        return len(self.free)

    @property
    def slots(self) -> int:
        """Token slots of the rows: each as wide as `width`, its free slots padding."""
        return len(self.free) * self.width

    def fits(self, n: int) -> bool:
        """Whether `n` tokens fit a row already open (else `add` opens one)."""
        return any(n <= free for free in self.free)

    def slots_with(self, n: int) -> int:
        """`slots` once `n` tokens are added, without adding them."""
        return self.slots if self.fits(n) else self.slots + self.width

    def add(self, n: int) -> int:
        """Place `n` tokens in the first row with room for them (opening one if none has); its index."""
        if n > self.width:
            raise ValueError(f"a group of {n} tokens cannot fit a row of {self.width}")
        for r, free in enumerate(self.free):
            if n <= free:
                self.free[r] -= n
                return r
        self.free.append(self.width - n)
        return len(self.free) - 1


def plan_rows(lengths: Sequence[int], width: int) -> list[list[int]]:
    """First-fit decreasing: indices into `lengths` grouped into rows of at most `width` tokens (equal lengths in
    index order)."""
    rows, out = Rows(width), []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = rows.add(lengths[i])
        if r == len(out):
            out.append([])
        out[r].append(i)
    return out


class Filling(Protocol[T]):
    """A batch being filled: its cost in token slots were `item` added, and adding it."""

    def cost_with(self, item: T) -> int: ...

    def add(self, item: T) -> None: ...


def fill(items: Iterable[T], budget: int, start: Callable[[], Filling[T]]) -> list[list[T]]:
    """`items` in order, in batches: a batch takes the next item while its cost stays within `budget`, else the
    item starts the next batch (an item alone always makes a batch, however large)."""
    out: list[list[T]] = [[]]
    filling = start()
    for item in items:
        if out[-1] and filling.cost_with(item) > budget:
            out.append([])
            filling = start()
        out[-1].append(item)
        filling.add(item)
    return out if out[-1] else []  # no items: no batch


def order_key(g: EncodedGroup) -> tuple[int, list[int], int]:
    """Prompt length, prompt ids, longest response: ids as a list, since tuples of arrays do not compare."""
    prompt = g.prompt_ids if isinstance(g.prompt_ids, list) else [int(t) for t in g.prompt_ids]
    return len(prompt), prompt, max((len(r) for r in g.response_ids), default=0)


def scoring_order(groups: Sequence[EncodedGroup]) -> list[int]:
    """Indices of `groups` by prompt (length, then ids) and longest response: what `count_batches` cuts. Each batch
    then pads to similar lengths."""
    return sorted(range(len(groups)), key=lambda i: order_key(groups[i]))


def count_batches(sizes: Sequence[int], order: list[int], batch_size: int) -> list[list[tuple[int, int, int]]]:
    """Groups of `sizes[g]` responses taken in `order`, cut into batches of at most `batch_size` responses: pieces
    (group, start, end), responses [start, end) of the group. A group that fits a batch is never cut (a cut
    computes its prompt twice); a larger one fills batches in turn."""
    out: list[list[tuple[int, int, int]]] = [[]]
    used = 0
    for g in order:
        if used and used + sizes[g] > batch_size >= sizes[g]:
            out.append([])
            used = 0
        start = 0
        while start < sizes[g]:
            if used == batch_size:
                out.append([])
                used = 0
            end = min(sizes[g], start + batch_size - used)
            out[-1].append((g, start, end))
            used += end - start
            start = end
    return [b for b in out if b]
