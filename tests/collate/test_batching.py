import random

import pytest

from conftest import packed_cost, padded_cost
from rm.collate.pack import PackedCollator, SharedCollator, group_length
from rm.collate.planner import PairBatches, shared_cost
from rm.tokens.store import EncodedGroup


def make_pairs(n, seed=0):
    rng = random.Random(seed)
    return [
        EncodedGroup.pair([1] * rng.randint(1, 60), [2] * rng.randint(1, 20), [3] * rng.randint(1, 20), 0, index=i)
        for i in range(n)
    ]


@pytest.mark.parametrize("layout", ["shared", "packed", "padded"])
def test_token_budget_batches_cover_every_pair_once_within_budget(layout):
    pairs = make_pairs(300)
    sampler = PairBatches(pairs, layout, batch_size=8, max_tokens=600, seed=1, group_pairs=64)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(300))
    for b in batches:
        chunk = [pairs[i] for i in b]
        if layout == "shared":
            slots = SharedCollator(0)(chunk)["input_ids"].numel()  # the tensor the collator really builds
            assert slots <= shared_cost(sorted((group_length(p) for p in chunk), reverse=True), 0)
        elif layout == "packed":
            slots = PackedCollator(0)(chunk)["input_ids"].numel()
            assert slots == packed_cost(chunk, 0)  # the same first-fit as the collator's
        else:
            slots = padded_cost(chunk)
        assert slots <= 600 or len(b) == 1


def test_batches_are_seeded_per_epoch_and_fixed_count_mode_is_plain():
    pairs = make_pairs(100)
    a = PairBatches(pairs, "shared", 8, max_tokens=500, seed=3)
    b = PairBatches(pairs, "shared", 8, max_tokens=500, seed=3)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    fixed = PairBatches(pairs, "padded", batch_size=8, shuffle=False)
    assert list(fixed)[0] == list(range(8)) and len(fixed) == 13


def test_length_grouping_wastes_fewer_slots_than_random_batches():
    pairs = make_pairs(400, seed=5)
    real = sum(group_length(p) for p in pairs)

    def slots(sampler):
        return sum(SharedCollator(0)([pairs[i] for i in b])["input_ids"].numel() for b in sampler)

    grouped = slots(PairBatches(pairs, "shared", 8, max_tokens=800, seed=0, group_pairs=400))
    random_eights = slots(PairBatches(pairs, "shared", 8, max_tokens=0, seed=0))
    assert real <= grouped < random_eights
    assert grouped / real < 1.1  # under 10% padding once grouped


def test_length_grouped_fixed_count_batches_keep_the_count_and_waste_less():
    """group_by_length: every pair once, batch_size pairs a batch (the last of a window may be short),
    batches of alike lengths, seeded per epoch: fewer padded slots than random batches of the same count."""
    pairs = make_pairs(400, seed=6)
    grouped = PairBatches(pairs, "padded", 8, seed=2, group_pairs=96, group_by_length=True)
    batches = list(grouped)
    assert sorted(i for b in batches for i in b) == list(range(400))
    assert all(len(b) == 8 for b in batches) and len(batches) == 50  # 96-pair windows (and the last, 16) split evenly
    plain = PairBatches(pairs, "padded", 8, seed=2)
    waste = {
        name: sum(padded_cost([pairs[i] for i in b]) for b in sampler) for name, sampler in (("grouped", grouped),
                                                                                            ("plain", plain))
    }  # fmt: skip
    assert waste["grouped"] < 0.8 * waste["plain"]
    again = list(PairBatches(pairs, "padded", 8, seed=2, group_pairs=96, group_by_length=True))
    assert again == batches
    grouped.set_epoch(1)
    assert list(grouped) != batches


@pytest.mark.parametrize("layout", ["shared", "packed", "padded"])
def test_each_layout_groups_by_the_width_it_needs(layout):
    """One window over all pairs, no shuffle: the batches are the pairs in order of the width the layout
    needs (whole pair for shared, prompt + longer response for padded and packed), widest first, which is
    the least padding consecutive batches of 8 can have."""
    rng = random.Random(9)
    pairs = [  # responses of very different lengths, so the two orders disagree
        EncodedGroup.pair([1] * rng.randint(1, 30), [2] * rng.randint(1, 40), [3] * rng.randint(1, 40), 0, index=i)
        for i in range(96)
    ]
    width = {
        "shared": group_length,
        "packed": lambda p: len(p.prompt_ids) + max(len(p.chosen_ids), len(p.rejected_ids)),
        "padded": lambda p: len(p.prompt_ids) + max(len(p.chosen_ids), len(p.rejected_ids)),
    }[layout]
    grouped = list(PairBatches(pairs, layout, 8, shuffle=False, group_pairs=96, group_by_length=True))
    widest_first = sorted(range(96), key=lambda i: -width(pairs[i]))
    assert [width(pairs[i]) for b in grouped for i in b] == [width(pairs[i]) for i in widest_first]


@pytest.mark.parametrize("layout", ["shared", "packed", "padded"])
@pytest.mark.parametrize("pack_length", [0, 90])
def test_filling_a_batch_group_by_group_gives_the_plan_of_recounting_it(layout, pack_length):
    """The planner keeps a micro-batch's rows as groups join (rm/collate/planner.py's `SharedFill`, `PaddedFill`);
    the plan must be the one that recounts `cost(batch + [i])` for each group, as the rule reads. Groups of 2 to 4
    responses with ties, several budgets, windows of mixed widths."""
    rng = random.Random(4)
    groups = []
    for i in range(400):
        k = rng.randint(2, 4)
        responses = [[5] * rng.randint(1, 30) for _ in range(k)]
        rank = [rng.randint(0, 2) for _ in range(k)]
        groups.append(EncodedGroup([1] * rng.randint(1, 50), responses, rank, 0, margin=0.0, index=i))
    for budget in (150, 400, 1500):
        plan = PairBatches(groups, layout, 8, max_tokens=budget, seed=2, group_pairs=100, pack_length=pack_length)
        recounted = []
        for window in plan._windows(plan_order(plan)):
            batch = []
            for i in window:
                if batch and plan.cost(batch + [i]) > budget:
                    recounted.append(batch)
                    batch = []
                batch.append(i)
            recounted.append(batch)
        assert sorted(map(tuple, plan.batches())) == sorted(map(tuple, recounted))


def plan_order(plan):
    """The shuffled order `PairBatches._plan` draws before cutting it into windows."""
    rng = random.Random(f"{plan.seed}/{plan.epoch}")
    order = list(range(len(plan.pairs)))
    rng.shuffle(order)
    return order
