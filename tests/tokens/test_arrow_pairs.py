"""The padded, shared and packed layouts and the batch plan read pairs from Arrow columns (`EncodedSplit`, numpy
views) exactly as they read pairs held as Python lists: the same plan, costs and tensors."""

import pytest
import torch

from conftest import packed_cost, padded_cost, random_pairs
from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches, shared_cost
from rm.collate.scoring import PackedScoring, PaddedLayout, by_prompt, scored
from rm.collate.shard import EvalBatches
from rm.collate.token_budget import order_key as _order_key
from rm.tokens.store import EncodedGroup, EncodedSplit


def lengths(p: EncodedGroup) -> int:
    return len(p.prompt_ids) + len(p.chosen_ids) + len(p.rejected_ids)


def reference_cost(layout: str, chunk: list[EncodedGroup]) -> int:
    """The micro-batch's token slots read from the pairs themselves, not from the plan's length arrays."""
    if layout == "padded":
        return padded_cost(chunk)
    if layout == "packed":
        return packed_cost(chunk, 0)
    return shared_cost(sorted((lengths(p) for p in chunk), reverse=True), 0)


@pytest.fixture
def pairs():
    out = random_pairs(50, 40, seed=3)
    out[5] = EncodedGroup.pair([], [7], [8, 9], 1, margin=0.25, index=5)  # an empty prompt
    return out


@pytest.mark.parametrize("layout", ["padded", "shared", "packed"])
def test_layouts_and_plans_are_the_same_for_list_and_arrow_pairs(pairs, layout):
    split = EncodedSplit.from_batches(
        [
            *EncodedSplit.from_groups(pairs[:16]).table.to_batches(),
            *EncodedSplit.from_groups(pairs[16:]).table.to_batches(),
        ]
    )
    collate = {"padded": PaddedCollator(0), "shared": SharedCollator(0), "packed": PackedCollator(0)}[layout]
    lists, arrow = (PairBatches(p, layout, 4, max_tokens=300, seed=1, group_pairs=16) for p in (pairs, split))
    assert lists.batches() == arrow.batches() and len(lists.batches()) > 3
    for b in arrow.batches():
        got, want = collate([split[i] for i in b]), collate([pairs[i] for i in b])
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
        assert arrow.cost(b) == lists.cost(b) == reference_cost(layout, [pairs[i] for i in b])
    # A process left without an eval micro-batch scores the first shortest pair again (rm/collate/shard.py).
    shortest = min(range(len(pairs)), key=lambda i: lengths(pairs[i]))
    n = len(arrow.batches())
    assert EvalBatches(arrow, n, n + 1)._batches() == [[shortest]]


@pytest.mark.parametrize("layout", [PaddedLayout(0), PackedScoring(0)], ids=["padded", "packed"])
def test_scoring_layouts_take_array_ids_as_they_take_lists(pairs, layout):
    """A pair is a group of two on one prompt, laid out from lists as from an `EncodedSplit`'s int32 views."""
    seqs = [scored(p.prompt_ids, [p.chosen_ids, p.rejected_ids]) for p in pairs[:6]]
    split = EncodedSplit.from_groups(pairs[:6])
    arrays = [scored(p.prompt_ids, [p.chosen_ids, p.rejected_ids]) for p in split]
    got, want = layout.collate(arrays), layout.collate(seqs)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    if isinstance(layout, PackedScoring):  # the prompt is in the rows once per pair, not once per sequence
        assert int((got["segment_ids"] == 0).sum()) == sum(len(p.prompt_ids) for p in pairs[:6])
    merged = by_prompt(seqs + arrays)  # equal ids merged whether lists or arrays: each prompt once
    assert len(merged) == len({tuple(p.prompt_ids) for p in pairs[:6]})
    assert sorted(i for _, rows in merged for i in rows) == list(range(24))
    order = sorted(range(len(seqs)), key=lambda i: _order_key(seqs[i]))
    assert sorted(range(len(arrays)), key=lambda i: _order_key(arrays[i])) == order
