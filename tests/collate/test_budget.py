"""The token-budget planner (rm/collate/token_budget.py): the one first-fit packer, the fill-within-budget loop, and the
count cut of `rm score` and the suites, against references worked out by hand or by brute force."""

import itertools
import random

import numpy as np
import pytest

from rm.collate.scoring import scored
from rm.collate.token_budget import Rows, count_batches, fill, plan_rows, scoring_order


def test_plan_rows_first_fit_decreasing():
    """By hand, rows of 6: 5 opens row 0 (1 free), 4 row 1 (2 free), 3 row 2; 2 fills row 1, 1 fills row 0."""
    assert plan_rows([5, 3, 4, 2, 1], 6) == [[0, 4], [2, 3], [1]]
    assert plan_rows([2, 2, 2], 4) == [[0, 1], [2]]  # equal lengths in index order
    with pytest.raises(ValueError, match="cannot fit"):
        plan_rows([7], 6)


def reference_rows(lengths: list[int], width: int) -> list[list[int]]:
    """First-fit decreasing as the textbook states it: each length, longest first, into the first row whose
    tokens so far leave room for it (sums recounted, no free-slot bookkeeping)."""
    rows: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        row = next((row for row in rows if sum(lengths[j] for j in row) + lengths[i] <= width), None)
        if row is None:
            rows.append([i])
        else:
            row.append(i)
    return rows


def fewest_rows(lengths: list[int], width: int) -> int:
    """The optimum by brute force: every assignment of items to at most len(lengths) rows."""
    n = len(lengths)
    for k in range(1, n + 1):
        for assign in itertools.product(range(k), repeat=n):
            if all(sum(x for x, a in zip(lengths, assign, strict=True) if a == r) <= width for r in range(k)):
                return k
    return n


def test_rows_are_first_fit_decreasing_and_within_its_bound_of_the_optimum():
    """Against the textbook rule on 500 random cases, and against the fewest rows (brute force, up to 7 items):
    first-fit decreasing needs at most 11/9 of them plus 6/9 (Dosa 2007)."""
    rng = random.Random(0)
    for case in range(500):
        lengths = [rng.randint(1, 12) for _ in range(rng.randint(1, 7 if case < 150 else 30))]
        width = max(lengths) + rng.randint(0, 8)
        rows = plan_rows(lengths, width)
        assert rows == reference_rows(lengths, width)
        packer = Rows(width)
        for n in sorted(lengths, reverse=True):
            packer.add(n)
        assert packer.count == len(rows) and packer.slots == len(rows) * width
        assert packer.free == [width - sum(lengths[i] for i in row) for row in rows]
        if case < 150:
            assert len(rows) <= 11 / 9 * fewest_rows(lengths, width) + 6 / 9


def test_rows_say_what_a_length_would_cost_before_it_is_added():
    rows = Rows(10)
    assert (rows.count, rows.slots, rows.fits(1), rows.slots_with(4)) == (0, 0, False, 10)
    assert rows.add(7) == 0 and rows.add(6) == 1  # 3 and 4 free
    assert (rows.fits(4), rows.fits(5), rows.slots_with(4), rows.slots_with(5)) == (True, False, 20, 30)
    assert rows.add(4) == 1 and rows.add(3) == 0 and rows.free == [0, 0]
    with pytest.raises(ValueError, match="a group of 11 tokens cannot fit a row of 10"):
        rows.add(11)


class Summed:
    """A batch whose cost is its items' sum."""

    def __init__(self):
        self.total = 0

    def cost_with(self, item: int) -> int:
        return self.total + item

    def add(self, item: int) -> None:
        self.total += item


def test_fill_takes_items_while_the_cost_stays_within_the_budget():
    """Budget 10: 4 + 5 = 9 fits, + 3 = 12 does not; 3 + 7 = 10 fits (within means at most); 12 alone is a batch
    however large, and so is the 2 after it (12 + 2 > 10)."""
    assert fill([4, 5, 3, 7, 12, 2], 10, Summed) == [[4, 5], [3, 7], [12], [2]]
    assert fill([], 10, Summed) == []


def test_count_batches_never_cut_a_group_that_fits_a_batch():
    """Batches of 3. Groups of 2, 2, 1: the second would straddle the first cut, so the batch closes early; a group
    of 4 (longer than a batch) fills batches in turn; groups of one are cut every 3 as they come."""
    assert count_batches([2, 2, 1], [0, 1, 2], 3) == [[(0, 0, 2)], [(1, 0, 2), (2, 0, 1)]]
    assert count_batches([4, 1], [0, 1], 3) == [[(0, 0, 3)], [(0, 3, 4), (1, 0, 1)]]
    assert count_batches([1] * 5, [4, 3, 2, 1, 0], 3) == [[(4, 0, 1), (3, 0, 1), (2, 0, 1)], [(1, 0, 1), (0, 0, 1)]]
    assert count_batches([], [], 3) == []


def test_scoring_order_sorts_by_prompt_length_then_ids_then_longest_response():
    """Prompts as lists or int32 arrays (an `EncodedSplit`'s views) sort alike."""
    seqs = [
        scored(np.asarray([5, 5], dtype=np.int32), [[9], [9, 9, 9]]),
        scored([7], [[9, 9]]),
        scored([5, 5], [[9]]),
        scored([4, 8], [[9, 9], [9]]),
        scored([6], [[9]]),
    ]
    assert scoring_order(seqs) == [4, 1, 3, 2, 0]
