"""Tokens, collate and the planner are K-general: groups of three (and mixed sizes) go through the same path as
pairs, and every response's reward equals a forward of that response alone. Users only have pairs today; this
is the ground the next formats (K ranked or rated responses per prompt) stand on."""

import random

import pytest
import torch

from conftest import tiny_model
from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.model.reward import RewardModel, group_rewards, pair_rewards
from rm.tokens.store import EncodedGroup, EncodedSplit

COLLATORS = {
    "shared": lambda pad: SharedCollator(pad, pack_length=96),
    "packed": lambda pad: PackedCollator(pad, pack_length=48),
    "padded": PaddedCollator,
}


def groups(vocab: int, n: int, seed: int, sizes: tuple[int, ...] = (3,)) -> list[EncodedGroup]:
    """Groups of the given sizes; ranks with a tie in every group of three or more."""
    rng = random.Random(seed)

    def ids(k):
        return [rng.randrange(2, vocab) for _ in range(k)]

    out = []
    for i in range(n):
        k = sizes[i % len(sizes)]
        rank = list(range(k)) if k == 2 else [0, 1, 1, *range(2, k - 1)]
        out.append(
            EncodedGroup(ids(rng.randint(0, 12)), [ids(rng.randint(1, 9)) for _ in range(k)], rank, i % 2, 0.0, i)
        )
    return out


def alone(model, group: EncodedGroup) -> list[float]:
    """The reference: each response after its prompt, a forward of its own (no padding, no custom mask)."""
    out = []
    for response in group.response_ids:
        t = torch.tensor([list(group.prompt_ids) + list(response)])
        out.append(model(input_ids=t, attention_mask=torch.ones_like(t))[0].item())
    return out


@pytest.mark.parametrize("layout", list(COLLATORS))
@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_rewards_of_groups_of_three_equal_separate_forwards(tokenizer, layout, arch):
    torch.manual_seed(0)
    model = RewardModel(tiny_model(tokenizer, arch)).eval()
    batch_groups = groups(len(tokenizer), 7, seed=2, sizes=(3, 3, 2, 4))
    batch = COLLATORS[layout](tokenizer.pad_token_id)(batch_groups)
    if layout == "shared":
        assert batch["input_ids"].shape[0] < len(batch_groups)  # several groups really share rows
    with torch.no_grad():
        rewards = group_rewards(model, batch)
        better, worse = pair_rewards(model, batch)
        want = [alone(model, g) for g in batch_groups]
    # Rewards come slot by slot: every group's first response, then every second one, ...
    order = [(i, k) for k in range(4) for i, g in enumerate(batch_groups) if k < len(g.response_ids)]
    assert len(rewards) == len(order)
    for r, (i, k) in zip(rewards.tolist(), order, strict=True):
        assert abs(r - want[i][k]) <= 1e-5
    # One ordered pair for every two responses of a group whose ranks differ (ties give none).
    expect = [
        (want[i][a], want[i][b])
        for i, g in enumerate(batch_groups)
        for a in range(len(g.response_ids))
        for b in range(len(g.response_ids))
        if g.rank[a] < g.rank[b]
    ]
    assert len(better) == len(expect) == sum({2: 1, 3: 2, 4: 5}[len(g.response_ids)] for g in batch_groups)
    for got_b, got_w, (want_b, want_w) in zip(better.tolist(), worse.tolist(), expect, strict=True):
        assert abs(got_b - want_b) <= 1e-5 and abs(got_w - want_w) <= 1e-5


def test_pairs_as_groups_of_two_give_the_pairwise_tensors():
    """A pair's batch: chosen rewards first, rejected after, one ordered pair each, in batch order."""
    pairs = [EncodedGroup.pair([5, 6], [8], [11, 12], 0), EncodedGroup.pair([7], [9, 10], [13], 1)]
    for layout, make in COLLATORS.items():
        batch = make(0)(pairs)
        assert batch["better"].tolist() == [0, 1] and batch["worse"].tolist() == [2, 3], layout


@pytest.mark.parametrize("layout", list(COLLATORS))
def test_the_planner_counts_a_group_by_the_slots_its_layout_builds(layout):
    mixed = EncodedSplit.from_groups(groups(50, 120, seed=4, sizes=(2, 3, 4)))
    plan = PairBatches(mixed, layout, batch_size=8, max_tokens=300, seed=1, group_pairs=40)
    batches = list(plan)
    assert sorted(i for b in batches for i in b) == list(range(len(mixed)))
    collate = COLLATORS[layout](0) if layout == "padded" else type(COLLATORS[layout](0))(0)
    for b in batches:
        built = collate([mixed[i] for i in b])["input_ids"].numel()  # the tensor the collator really builds
        assert built <= plan.cost(b) if layout == "shared" else built == plan.cost(b)
        assert plan.cost(b) <= 300 or len(b) == 1
