"""One plan dealt out to the processes: each optimizer step gives every process one micro-batch per accumulation step.

Every process computes the same global plan (`PairBatches`: a function of the seed, the epoch and the pair
lengths), so no process has to ask another which pairs it holds. The plan's micro-batches are taken
W x A at a time (W processes, A accumulation steps): those make one optimizer step. Within a step they go
out by decreasing cost, each to the process with the least work so far that still has room
(longest-processing-time first), so the processes of a step wait on each other as little as the plan allows.

An epoch whose micro-batch count is not a multiple of W x A is evened out before dealing, never by dropping
a pair nor by an empty micro-batch: micro-batches with the most pairs are cut in two (a part of a batch
costs no more than the whole) until the count is a multiple; only where there are too few pairs for that
(almost every micro-batch a single pair) are the two smallest merged instead. Every process then runs the
same number of micro-batches, each pair is in exactly one of them, and an epoch is count / (W x A) steps.
The loop divides each micro-batch's summed loss by the pairs of its whole step (`step_pairs`), so how pairs
fall on processes and accumulation steps does not change the update (rm/training/loop.py).

accelerate's batch-sampler sharding is not used: it assumes batches of `batch_size` items, and with token
budgets it dropped or emptied micro-batches and left processes with different counts (a hang).

Scoring deals its plan differently (`deal_rounds`): nothing is accumulated, so the one-process batches go out W at
a time, each run whole on one process. Its callers: `EvalBatches` (training's eval, `rm eval`) and
rm/suites/score_items.py's `score_all` (the suites, training's suite evals); both gather what they scored with
rm/evaluation/gather.py's `gather_once`.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
from torch.utils.data import Sampler

from rm.collate.planner import PairBatches
from rm.errors import DataError

log = logging.getLogger("rm")

B = TypeVar("B")


def even_out(batches: list[list[int]], slots: int) -> list[list[int]]:
    """The micro-batches, their count made a multiple of `slots` without losing, repeating or emptying one."""
    n_pairs = sum(len(b) for b in batches)
    if n_pairs < slots:
        raise DataError(f"{n_pairs} training pairs cannot fill {slots} micro-batches (processes x train.grad_accum)")
    extra = -len(batches) % slots
    if not extra:
        return batches
    if len(batches) + extra <= n_pairs:
        return _split(batches, extra)
    return _merge(batches, slots - extra)


def _split(batches: list[list[int]], extra: int) -> list[list[int]]:
    """`extra` more micro-batches, by cutting those with the most pairs (ties: the later one) into equal runs."""
    pieces = [1] * len(batches)
    heap = [(-len(b), -i) for i, b in enumerate(batches)]  # largest piece first
    heapq.heapify(heap)
    for _ in range(extra):
        _, neg = heapq.heappop(heap)
        pieces[-neg] += 1
        n, k = len(batches[-neg]), pieces[-neg]
        heapq.heappush(heap, (-n // k, neg))  # minus the ceiling of n / k
    out = []
    for b, k in zip(batches, pieces, strict=True):
        out += [b[j * len(b) // k : (j + 1) * len(b) // k] for j in range(k)]
    return out


def _merge(batches: list[list[int]], remove: int) -> list[list[int]]:
    """`remove` fewer micro-batches, each time joining the two with the fewest pairs (over budget, necessarily)."""
    out = [list(b) for b in batches]
    for _ in range(remove):
        i, j = sorted(sorted(range(len(out)), key=lambda k: (len(out[k]), k))[:2])
        out[i] += out.pop(j)
    return out


def deal(batches: list[list[int]], costs: list[int], world: int, accum: int) -> list[list[list[int]]]:
    """Each process's micro-batches, in the order it runs them; `len(batches)` is a multiple of world x accum."""
    slots = world * accum
    ranks: list[list[list[int]]] = [[] for _ in range(world)]
    for start in range(0, len(batches), slots):
        load, count = [0] * world, [0] * world
        for i in sorted(range(start, start + slots), key=lambda i: (-costs[i], i)):
            r = min((r for r in range(world) if count[r] < accum), key=lambda r: (load[r], r))
            ranks[r].append(batches[i])
            load[r] += costs[i]
            count[r] += 1
    return ranks


class RankBatches(Sampler[list[int]]):
    """This process's micro-batches of the current epoch of `plan`, from `start` on (a resumed run's position).

    `len()` is the whole epoch's count, the same on every process; `step_pairs()[s]` is the weight that optimizer
    step s of the epoch holds on all processes together: its groups (pairs), or the sum of `weights` over them
    where given (rm/model/objective.py: comparisons under `loss.group_weighting=pair`, nothing for a group with
    nothing to compare).
    """

    def __init__(self, plan: PairBatches, rank: int, world: int, accum: int, weights: np.ndarray | None = None):
        self.plan, self.rank, self.world, self.accum = plan, rank, world, accum
        self.weights = weights
        self.start = 0
        self._cache: tuple[int, list[list[int]], list[int]] | None = None

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.plan.set_epoch(epoch)
        self.start = start

    def _epoch(self) -> tuple[list[list[int]], list[int]]:
        if self._cache is None or self._cache[0] != self.plan.epoch:
            started = time.perf_counter()  # seconds on 160,000 HH-sized pairs: worth a log line
            slots = self.world * self.accum
            batches = even_out(self.plan.batches(), slots)
            ranks = deal(batches, [self.plan.cost(b) for b in batches], self.world, self.accum)
            steps = [self._weight(batches[s : s + slots]) for s in range(0, len(batches), slots)]
            self._cache = (self.plan.epoch, ranks[self.rank], steps)
            log.info(
                "plan: epoch %d, %d micro-batches in %d optimizer steps, %d per process (%.1f s)",
                self.plan.epoch, len(batches), len(steps), len(ranks[self.rank]), time.perf_counter() - started,
            )  # fmt: skip
        return self._cache[1], self._cache[2]

    def _weight(self, batches: list[list[int]]) -> int:
        if self.weights is None:
            return sum(len(b) for b in batches)
        return max(1, int(sum(self.weights[b].sum() for b in batches)))  # a step of nothing to compare adds 0 / 1

    def step_pairs(self) -> list[int]:
        return self._epoch()[1]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._epoch()[0][self.start :])

    def __len__(self) -> int:
        return len(self._epoch()[0])


def deal_rounds(
    batches: Sequence[B], rank: int, world: int, filler: B, cost: Callable[[B], int] | None = None
) -> tuple[list[B], int]:
    """Process `rank`'s share of a scoring plan, in the order it runs it, and how many of it are the plan's.

    The plan goes out W at a time (W = `world`, a round): within a round by decreasing `cost` (ties: plan order),
    or in plan order without costs, the first to process 0. Each batch is run whole, on one process, so every
    value comes from the same tensors whatever W. Only the last round can be short; a process left without a
    batch there runs `filler` once, at its end, so every process runs ceil(len(batches) / W) forwards (13
    batches on 3 processes: 5 each, two of them fillers), which a DDP or FSDP model needs. The caller drops the
    filler's values or gathers with `gather_once`, which keeps one copy of each.
    """
    mine = []
    for start in range(0, len(batches), world):
        round_ = list(batches[start : start + world])
        if cost is not None and len(round_) > 1:  # one process: no cost computed
            round_ = sorted(round_, key=cost, reverse=True)  # stable: ties keep plan order
        mine.append(round_[rank] if rank < len(round_) else filler)
    short = len(batches) % world
    return mine, len(mine) - (1 if short and rank >= short else 0)


class EvalBatches(Sampler[list[int]]):
    """This process's share of an eval plan: the very micro-batches one process would run, dealt W at a time by
    `deal_rounds`, the costliest first in each round.

    So every pair's reward comes from the same tensors whatever the number of processes. Processes left
    without a micro-batch in the last round score the shortest pair once more (the same count everywhere,
    which sharded models need), after their `real` micro-batches of the plan; rm/evaluation/gather.py's
    `gather_rewards` drops that repeat, so the reward kept is always the one of the pair's own micro-batch.
    """

    def __init__(self, plan: PairBatches, rank: int, world: int):
        self.plan, self.rank, self.world = plan, rank, world
        self._mine: tuple[list[list[int]], int] | None = None

    def _deal(self) -> tuple[list[list[int]], int]:
        if self._mine is None:
            batches = self.plan.batches()
            filler = [int(self.plan.lengths.argmin())] if batches and self.world > 1 else []  # the first shortest
            self._mine = deal_rounds(batches, self.rank, self.world, filler, self.plan.cost)
        return self._mine

    def _batches(self) -> list[list[int]]:
        return self._deal()[0]

    @property
    def real(self) -> int:
        """How many of this process's micro-batches are the plan's: the rest (one at most) is a filler."""
        return self._deal()[1]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())
