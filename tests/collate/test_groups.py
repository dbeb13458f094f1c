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
from rm.model.group_loss import plackett_luce_loss
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
            EncodedGroup(
                ids(rng.randint(0, 12)), [ids(rng.randint(1, 9)) for _ in range(k)], rank, i % 2, margin=0.0, index=i
            )
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


@pytest.mark.parametrize("layout", list(COLLATORS))
def test_every_layout_names_each_rewards_group_rank_pairs_and_ties(tokenizer, layout):
    """`pair_group`, `tie_a`/`tie_b` and `response_group`/`response_rank` read with the rewards give, per group,
    the ordered pairs, the tied pairs and the ranking of that group's own separate forwards; so the group losses
    (rm/model/group_loss.py) computed from a batch equal the same losses computed group by group."""
    torch.manual_seed(0)
    model = RewardModel(tiny_model(tokenizer, "llama")).eval()
    batch_groups = groups(len(tokenizer), 7, seed=3, sizes=(3, 2, 4))
    batch = COLLATORS[layout](tokenizer.pad_token_id)(batch_groups)
    with torch.no_grad():
        r = group_rewards(model, batch).double()
        want = [torch.tensor(alone(model, g), dtype=torch.float64) for g in batch_groups]
    ranks = [torch.tensor(g.rank) for g in batch_groups]
    one = [torch.zeros(len(w), dtype=torch.long) for w in want]
    by_group = sum(plackett_luce_loss(w, g, k) for w, g, k in zip(want, one, ranks, strict=True))
    got = plackett_luce_loss(r, batch["response_group"], batch["response_rank"])
    assert abs(got.item() - by_group.item()) <= 1e-5
    ties = sorted(
        (want[i][a].item(), want[i][b].item())
        for i, g in enumerate(batch_groups)
        for a in range(len(g.rank))
        for b in range(a + 1, len(g.rank))
        if g.rank[a] == g.rank[b]
    )
    got_ties = sorted(zip(r[batch["tie_a"]].tolist(), r[batch["tie_b"]].tolist(), strict=True))
    assert len(got_ties) == len(ties) == sum(len(g.rank) > 2 for g in batch_groups)  # one in each of 3 or 4
    assert all(abs(x - y) <= 1e-5 for p, q in zip(got_ties, ties, strict=True) for x, y in zip(p, q, strict=True))
    pairs_per_group = torch.bincount(batch["pair_group"], minlength=len(batch_groups)).tolist()
    assert pairs_per_group == [{2: 1, 3: 2, 4: 5}[len(g.rank)] for g in batch_groups]
