"""The plan dealt to processes: for 1 to 8 processes, no empty micro-batch, the same count on every process,
every pair exactly once per epoch, and the step sizes the loss divides by add up."""

import random
from collections import Counter

import pytest

from rm.collate.planner import PairBatches
from rm.collate.shard import EvalBatches, RankBatches, deal, even_out
from rm.errors import DataError
from rm.tokens.store import EncodedGroup


def make_pairs(n, seed=0):
    rng = random.Random(seed)
    return [
        EncodedGroup.pair([1] * rng.randint(1, 60), [2] * rng.randint(1, 20), [3] * rng.randint(1, 20), 0, index=i)
        for i in range(n)
    ]


def shares(pairs, world, accum, epoch=0, **plan):
    """Every process's RankBatches for `epoch`, each with a plan of its own (as separate processes have)."""
    out = []
    for rank in range(world):
        sampler = RankBatches(PairBatches(pairs, seed=5, **plan), rank, world, accum)
        sampler.set_epoch(epoch)
        out.append(sampler)
    return out


PLANS = {
    "budget-shared": {"layout": "shared", "batch_size": 8, "max_tokens": 500, "group_pairs": 64},
    "budget-padded": {"layout": "padded", "batch_size": 8, "max_tokens": 700, "group_pairs": 64},
    "fixed": {"layout": "padded", "batch_size": 7},
}


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("accum", [1, 3])
def test_every_process_gets_the_same_count_and_every_pair_once(plan, world, accum):
    pairs = make_pairs(203, seed=world)
    for epoch in (0, 1):
        samplers = shares(pairs, world, accum, epoch, **PLANS[plan])
        mine = [list(s) for s in samplers]
        counts = {len(m) for m in mine}
        assert len(counts) == 1 and counts.pop() % accum == 0  # equal counts, whole optimizer steps
        assert all(b for m in mine for b in m)  # no empty micro-batch
        assert sorted(i for m in mine for b in m for i in b) == list(range(len(pairs)))
        # Optimizer step s is micro-batches [s*accum, (s+1)*accum) of every process; its pair count is the
        # divisor of the loss, the same list on every process.
        steps = samplers[0].step_pairs()
        assert all(s.step_pairs() == steps for s in samplers)
        got = [sum(len(m[i]) for m in mine for i in range(s * accum, (s + 1) * accum)) for s in range(len(steps))]
        assert got == steps and sum(steps) == len(pairs)


def test_the_plan_depends_on_processes_times_accumulation_only():
    """2 processes x 1 and 1 process x 2 run the same optimizer steps (the pairs of each step agree)."""
    pairs = make_pairs(150, seed=3)
    two = shares(pairs, 2, 1, **PLANS["budget-shared"])
    one = shares(pairs, 1, 2, **PLANS["budget-shared"])[0]
    a, b = [list(s) for s in two], list(one)
    for s in range(len(one) // 2):
        assert sorted(a[0][s] + a[1][s]) == sorted(b[2 * s] + b[2 * s + 1])


def test_one_process_without_accumulation_keeps_the_plan_as_is():
    pairs = make_pairs(120)
    plan = PairBatches(pairs, seed=5, **PLANS["budget-shared"])
    (sampler,) = shares(pairs, 1, 1, **PLANS["budget-shared"])
    assert list(sampler) == plan.batches()


def test_a_resumed_process_starts_at_its_position():
    pairs = make_pairs(120)
    sampler = shares(pairs, 3, 2, epoch=1, **PLANS["budget-shared"])[1]
    whole = list(sampler)
    sampler.set_epoch(1, start=4)
    assert list(sampler) == whole[4:] and len(sampler) == len(whole)


def test_split_parts_stay_within_the_budget():
    pairs = make_pairs(300, seed=9)
    for world in range(2, 9):
        plan = PairBatches(pairs, "padded", 8, max_tokens=700, seed=world, group_pairs=64)
        for b in even_out(plan.batches(), world * 2):
            assert plan.cost(b) <= 700 or len(b) == 1


def test_even_out_merges_only_when_pairs_are_too_few_to_split_and_fails_below_one_pair_a_slot():
    singles = [[i] for i in range(10)]
    assert even_out(singles, 5) == singles
    merged = even_out(singles, 4)  # 10 single pairs cannot make 12 micro-batches: two are joined, 8 remain
    assert len(merged) == 8 and sorted(i for b in merged for i in b) == list(range(10))
    assert sorted(len(b) for b in even_out([[0, 1, 2, 3], [4]], 4)) == [1, 1, 1, 2]
    with pytest.raises(DataError, match="3 training pairs cannot fill 4 micro-batches"):
        even_out([[0, 1], [2]], 4)


def test_dealing_balances_the_cost_of_a_step():
    costs = [10, 9, 8, 1, 1, 1]
    ranks = deal([[i] for i in range(6)], costs, world=3, accum=2)
    loads = [sum(costs[b[0]] for b in r) for r in ranks]
    assert loads == [11, 10, 9]  # longest first, each to the least loaded process with room


@pytest.mark.parametrize("world", range(1, 9))
def test_eval_shares_are_the_one_process_batches_with_every_pair_counted(world):
    pairs = make_pairs(61, seed=world)
    kwargs = {"layout": "shared", "batch_size": 16, "max_tokens": 400, "shuffle": False}
    single = PairBatches(pairs, **kwargs).batches()
    mine = [list(EvalBatches(PairBatches(pairs, **kwargs), rank, world)) for rank in range(world)]
    assert len({len(m) for m in mine}) == 1  # every process runs as many forwards
    batches = [b for m in mine for b in m]
    assert all(b for b in batches)
    assert {i for b in batches for i in b} == set(range(len(pairs)))
    # Each of the one-process batches is run as it is (same tensors, same rewards); the rest are repeats
    # of one pair, filling the last round.
    extra = Counter(map(tuple, batches))
    extra.subtract(Counter(map(tuple, single)))
    assert all(v >= 0 for v in extra.values())
    repeats = [b for b, v in extra.items() for _ in range(v)]
    assert len(repeats) == -len(single) % world and all(len(b) == 1 for b in repeats)


def test_even_out_on_random_plans():
    rng = random.Random(0)
    for _ in range(300):
        sizes = [rng.choice([1, 1, 2, 3, 9]) for _ in range(rng.randint(1, 30))]
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        batches = [list(range(s, s + n)) for s, n in zip(starts, sizes, strict=True)]
        slots = rng.randint(1, 16)
        if sum(sizes) < slots:
            continue
        out = even_out(batches, slots)
        assert len(out) % slots == 0 and all(out)
        assert sorted(i for b in out for i in b) == list(range(sum(sizes)))
