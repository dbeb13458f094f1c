"""Which pairs go into each micro-batch: a fixed count, or as many as a token budget holds.

With a budget, a micro-batch of short pairs holds many and one of long pairs few, so every step
does about the same work and no memory is reserved for the worst case. Pairs are grouped by length
inside windows of `group_pairs` shuffled pairs (so neighbours are alike and waste little), and the
resulting micro-batches are shuffled again, so training does not see long ones first. "Length" is the
width the pair needs in its layout: the whole pair in the shared layout (one segment), prompt + the
longer response in the padded and packed ones (their widest row or sequence). Sorting padded pairs by
the whole pair's length instead cost 8% more slots on HH harmless-base (386.6 against 355.7 a pair).

Everything follows from (seed, epoch): a resumed or repeated run sees the same batches, and every
process of a multi-process run computes the same plan (rm/collate/shard.py deals it out).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

from rm.tokens.store import EncodedPair, id_lengths


def shared_cost(group: list[int], pack_length: int) -> int:
    """Token slots of a shared-layout micro-batch whose pair lengths are `group` (sorted longest first)."""
    width = max(group[0], pack_length)
    room: list[int] = []
    for n in group:  # first-fit, as rm.collate.pack.plan_rows does with the same (sorted) lengths
        for r, free in enumerate(room):
            if n <= free:
                room[r] -= n
                break
        else:
            room.append(width - n)
    return len(room) * width


class PairBatches(Sampler[list[int]]):
    """Yields lists of dataset indices, one per micro-batch.

    `max_tokens == 0`: `batch_size` pairs in random order (or in order when not shuffling), the way
    most trainers batch; with `group_by_length`, pairs of similar length, the way TRL's length-grouped
    sampling batches (sorted within windows of `group_pairs` shuffled pairs, batches shuffled).
    `max_tokens > 0`: length-grouped micro-batches of at most `max_tokens` token slots in the given
    layout (a single pair larger than the budget still gets a micro-batch).

    Planning reads only token counts, taken once as numpy arrays (`id_lengths`: from the Arrow offsets of
    an `EncodedSplit`), so a plan over 160,000 pairs makes no object per pair.
    """

    def __init__(
        self,
        pairs: Sequence[EncodedPair],
        layout: str,
        batch_size: int,
        max_tokens: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        group_pairs: int = 512,
        pack_length: int = 0,
        group_by_length: bool = False,
    ):
        self.pairs = pairs
        self.layout = layout
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.group_pairs = group_pairs
        self.pack_length = pack_length
        self.group_by_length = group_by_length
        self.epoch = 0
        prompt, chosen, rejected = id_lengths(pairs)
        self.lengths = prompt + chosen + rejected
        """Tokens of each pair, prompt once ([pairs]): its segment in the shared layout, and what groups by length."""
        self._padded_width = prompt + np.maximum(chosen, rejected)
        self._sort_key = self.lengths if layout == "shared" else self._padded_width
        """What a window is sorted by: the width the pair needs in this layout."""
        self._sequences = np.stack([prompt + chosen, prompt + rejected], axis=1)  # [pairs, 2]: the packed layout's
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        if self._cache is None or self._cache[0] != self.epoch:
            self._cache = (self.epoch, self._plan())
        return self._cache[1]

    def _plan(self) -> list[list[int]]:
        rng = random.Random(f"{self.seed}/{self.epoch}")
        order = list(range(len(self.pairs)))
        if self.shuffle:
            rng.shuffle(order)
        if self.max_tokens <= 0 and not self.group_by_length:
            return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        out: list[list[int]] = []
        for window in self._windows(order):
            if self.max_tokens <= 0:  # a fixed pair count, length-grouped
                out += [window[i : i + self.batch_size] for i in range(0, len(window), self.batch_size)]
                continue
            batch: list[int] = []
            for i in window:
                if batch and self.cost(batch + [i]) > self.max_tokens:
                    out.append(batch)
                    batch = []
                batch.append(i)
            out.append(batch)
        if self.shuffle:
            rng.shuffle(out)
        return out

    def _windows(self, order: list[int]) -> Iterator[list[int]]:
        """`order` in windows of `group_pairs`, each sorted widest first (ties keep their order, as `sorted`)."""
        for start in range(0, len(order), self.group_pairs):
            window = np.asarray(order[start : start + self.group_pairs], dtype=np.int64)
            yield window[np.argsort(-self._sort_key[window], kind="stable")].tolist()

    def cost(self, batch: list[int]) -> int:
        """Token slots of micro-batch `batch` in this layout: what the budget bounds and dealing balances across
        processes, from the length arrays (the tests check it against slots counted from the pairs themselves):
        shared rows hold whole pairs, packed rows the pairs' sequences (both first-fit, `shared_cost`), padded
        rows are two a pair, as wide as the widest."""
        idx = np.asarray(batch, dtype=np.int64)
        if self.layout == "shared":
            return shared_cost(sorted(self.lengths[idx].tolist(), reverse=True), self.pack_length)
        if self.layout == "packed":
            return shared_cost(sorted(self._sequences[idx].ravel().tolist(), reverse=True), self.pack_length)
        return 2 * len(batch) * int(self._padded_width[idx].max())

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())

    def __len__(self) -> int:
        return len(self.batches())
