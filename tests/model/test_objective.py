"""The loop's objective (rm/model/objective.py) on hand-made groups: every loss against a computation by hand, and
the weight a micro-batch carries in its step against the per-group weights the plan sums (step_weight)."""

import math

import pytest
import torch

from rm.collate.comparisons import comparison_counts
from rm.collate.padded import PaddedCollator
from rm.config.schema import LossConfig
from rm.model.objective import preference_loss, step_weight, tie_parameter
from rm.tokens.store import EncodedGroup


def groups() -> list[EncodedGroup]:
    """A pair; a group of 3 ranked 0 < 1 < 2 with scores; a group of 3 with a tie; a tied pair; explicit pairs."""
    return [
        EncodedGroup([5], [[6], [7]], [0, 1], 0, margin=0.5, index=0),
        EncodedGroup([5, 8], [[6], [7, 7], [9]], [0, 1, 2], 0, margin=0.0, index=1, scores=[4.0, 2.5, 1.0]),
        EncodedGroup([3], [[6], [7], [8]], [0, 0, 1], 1, margin=0.0, index=2),
        EncodedGroup([4], [[6], [7]], [0, 0], 1, margin=0.0, index=3),
        EncodedGroup([2], [[6], [7], [8]], [0, 1, 1], 1, margin=0.0, index=4, pairs=[0, 1, 0, 2, 1, 0, 0, 2, 1]),
    ]


def rewards_by_group(batch: dict, r: torch.Tensor) -> dict[tuple[int, int], float]:
    """(group, slot) -> reward, read back through the batch's own response_group/response_slot."""
    return {
        (int(g), int(k)): float(x) for g, k, x in zip(batch["response_group"], batch["response_slot"], r, strict=True)
    }


def bt(d: float) -> float:
    return math.log1p(math.exp(-d))


@pytest.fixture(scope="module")
def batch_and_rewards():
    batch = PaddedCollator(0)(groups())
    torch.manual_seed(0)
    r = torch.randn(len(batch["response_group"]), dtype=torch.float64)
    return batch, r, rewards_by_group(batch, r)


# Per group: its comparisons (a, b, tie), as the data says them.
COMPARISONS = {
    0: [(0, 1, False)],
    1: [(0, 1, False), (0, 2, False), (1, 2, False)],
    2: [(0, 2, False), (1, 2, False), (0, 1, True)],
    3: [(0, 1, True)],
    4: [(0, 1, False), (2, 1, False), (0, 2, True)],
}


@pytest.mark.parametrize("weighting", ["group", "pair"])
def test_pairwise_loss_by_hand(batch_and_rewards, weighting):
    batch, r, at = batch_and_rewards
    want, weight = 0.0, 0
    for g, comps in COMPARISONS.items():
        strict = [(a, b) for a, b, tie in comps if not tie]
        for a, b in strict:
            want += bt(at[g, a] - at[g, b]) / (len(strict) if weighting == "group" else 1)
        weight += (1 if strict else 0) if weighting == "group" else len(strict)
    loss, w = preference_loss(LossConfig(group_weighting=weighting), r, batch)
    assert float(loss) == pytest.approx(want, rel=1e-12)
    assert int(w) == weight


def test_margins_are_score_differences_or_the_pairs_margin(batch_and_rewards):
    batch, r, at = batch_and_rewards
    scores = [4.0, 2.5, 1.0]
    want = bt(at[0, 0] - at[0, 1] - 0.5)  # the pair's own margin
    want += sum(bt(at[1, a] - at[1, b] - (scores[a] - scores[b])) for a, b, _ in COMPARISONS[1]) / 3
    want += sum(bt(at[2, a] - at[2, b]) for a, b, t in COMPARISONS[2] if not t) / 2
    want += sum(bt(at[4, a] - at[4, b]) for a, b, t in COMPARISONS[4] if not t) / 2
    loss, _ = preference_loss(LossConfig(use_margin=True), r, batch)
    assert float(loss) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("weighting", ["group", "pair"])
def test_davidson_by_hand(batch_and_rewards, weighting):
    batch, r, at = batch_and_rewards
    nu = 0.7
    want, weight = 0.0, 0
    for g, comps in COMPARISONS.items():
        for a, b, tie in comps:
            d = at[g, a] - at[g, b]
            norm = math.exp(d / 2) + math.exp(-d / 2) + nu
            p = nu / norm if tie else math.exp(d / 2) / norm
            want += -math.log(p) / (len(comps) if weighting == "group" else 1)
        weight += 1 if weighting == "group" else len(comps)
    cfg = LossConfig(ties="davidson", davidson_nu=nu, group_weighting=weighting)
    loss, w = preference_loss(cfg, r, batch)
    assert float(loss) == pytest.approx(want, rel=1e-12)
    assert int(w) == weight


def test_learned_nu_starts_at_softplus_zero_and_gets_a_gradient(batch_and_rewards):
    batch, r, _ = batch_and_rewards
    raw = tie_parameter(LossConfig(ties="davidson"))
    assert raw is not None and tie_parameter(LossConfig(ties="davidson", davidson_nu=0.5)) is None
    loss, _ = preference_loss(LossConfig(ties="davidson"), r, batch, raw)
    fixed, _ = preference_loss(LossConfig(ties="davidson", davidson_nu=math.log(2.0)), r, batch)
    assert float(loss) == pytest.approx(float(fixed), rel=1e-6)
    loss.backward()
    assert raw.grad is not None and raw.grad != 0


@pytest.mark.parametrize("ties", ["skip", "davidson"])
def test_plackett_luce_by_hand(batch_and_rewards, ties):
    """The ranking's likelihood per group; under Davidson each group also adds the mean -log P(tie) of its ties."""
    batch, r, at = batch_and_rewards
    nu = 0.4
    want, weight = 0.0, 0
    ranks = {g: [int(x) for x in grp.rank] for g, grp in enumerate(groups())}
    for g, rank in ranks.items():
        terms = 0
        for i, q in enumerate(rank):
            rivals = [j for j, p in enumerate(rank) if p > q] + [i]
            if len(rivals) > 1:
                want += math.log(sum(math.exp(at[g, j]) for j in rivals)) - at[g, i]
                terms += 1
        tied = [(a, b) for a, b, tie in COMPARISONS[g] if tie] if ties == "davidson" else []
        for a, b in tied:
            d = at[g, a] - at[g, b]
            want += -math.log(nu / (math.exp(d / 2) + math.exp(-d / 2) + nu)) / len(tied)
        weight += terms > 0 or bool(tied)
    loss, w = preference_loss(LossConfig(type="plackett_luce", ties=ties, davidson_nu=nu), r, batch)
    assert float(loss) == pytest.approx(want, rel=1e-12)
    assert int(w) == weight


@pytest.mark.parametrize(
    "cfg",
    [LossConfig(), LossConfig(group_weighting="pair"), LossConfig(ties="davidson", davidson_nu=1.0),
     LossConfig(ties="davidson", davidson_nu=1.0, group_weighting="pair"), LossConfig(type="plackett_luce"),
     LossConfig(type="plackett_luce", ties="davidson", davidson_nu=1.0)],
)  # fmt: skip
def test_plan_weights_add_up_to_the_loss_weight(batch_and_rewards, cfg):
    """What the plan sums per step (step_weight of each group's comparison counts) is what the loss divides by."""
    batch, r, _ = batch_and_rewards
    strict, tied = comparison_counts(groups())
    assert strict.tolist() == [1, 3, 2, 0, 2] and tied.tolist() == [0, 0, 1, 1, 1]
    planned = sum(step_weight(cfg, s, t) for s, t in zip(strict.tolist(), tied.tolist(), strict=True))
    assert int(preference_loss(cfg, r, batch)[1]) == planned
