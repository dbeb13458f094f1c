"""Group losses (rm/model/group_loss.py) against the formulas written out by hand, term by term, in floats."""

import math

import pytest
import torch

from rm.model.group_loss import (
    bradley_terry_loss,
    davidson_loss,
    learned_nu,
    pair_weights,
    pairwise_loss,
    plackett_luce_loss,
)


def bt(d):
    return math.log(1 + math.exp(-d))


def t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def idx(values):
    return torch.tensor(values, dtype=torch.long)


R = [0.7, -0.2, 1.3, 0.1, -1.1, 0.4, 2.0]
"""A group of three (rewards 0-2), a group of two (3-4), a group of two (5-6)."""


def test_pairwise_over_a_group_weighs_each_group_alike():
    r = t(R)
    # group 0 ranked 2 > 0 > 1 (responses 2, 0, 1): three ordered pairs; groups 1 and 2: one pair each
    better, worse, group = idx([2, 2, 0, 3, 6]), idx([0, 1, 1, 4, 5]), idx([0, 0, 0, 1, 2])
    hand_group = (bt(1.3 - 0.7) + bt(1.3 + 0.2) + bt(0.7 + 0.2)) / 3 + bt(0.1 + 1.1) + bt(2.0 - 0.4)
    hand_pair = bt(1.3 - 0.7) + bt(1.3 + 0.2) + bt(0.7 + 0.2) + bt(0.1 + 1.1) + bt(2.0 - 0.4)
    w = pair_weights(group, 3, "group", torch.float64)
    assert w.tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1, 1])
    assert pairwise_loss(r, better, worse, w).item() == pytest.approx(hand_group, abs=1e-12)
    assert pairwise_loss(r, better, worse, pair_weights(group, 3, "pair", torch.float64)).item() == pytest.approx(
        hand_pair, abs=1e-12
    )


def test_pairs_are_todays_loss_under_either_weighting_and_with_margins():
    r = t(R[:6])
    better, worse, margin = idx([0, 1, 2]), idx([3, 4, 5]), t([0.5, 0.0, -0.25])
    today = bradley_terry_loss(r[better], r[worse], margin, reduction="sum")
    for weighting in ("group", "pair"):
        w = pair_weights(idx([0, 1, 2]), 3, weighting, torch.float64)
        assert pairwise_loss(r, better, worse, w, margin).item() == pytest.approx(today.item(), abs=1e-12)
    with pytest.raises(ValueError, match="weighting"):
        pair_weights(idx([0]), 1, "prompt")


def davidson_by_hand(a, b, nu, tie):
    pa, pb = math.exp(a), math.exp(b)
    denominator = pa + pb + nu * math.sqrt(pa * pb)
    return -math.log((nu * math.sqrt(pa * pb) if tie else pa) / denominator)


@pytest.mark.parametrize("nu", [0.0, 0.3, 1.0, 4.0])
def test_davidson_matches_its_probabilities_written_with_exp_and_sqrt(nu):
    r = t(R)
    better, worse = idx([2, 6, 0]), idx([1, 5, 4])
    tie_a, tie_b = idx([0, 3]), idx([1, 4])
    hand = sum(davidson_by_hand(R[a], R[b], nu, False) for a, b in zip([2, 6, 0], [1, 5, 4], strict=True))
    hand += sum(davidson_by_hand(R[a], R[b], nu, True) for a, b in ((0, 1), (3, 4))) if nu else math.inf
    got = davidson_loss(r, better, worse, tie_a, tie_b, nu).item()
    assert got == pytest.approx(hand, abs=1e-10) if nu else got == math.inf


def test_davidson_without_ties_at_nu_zero_is_bradley_terry_and_nu_is_trainable():
    r = t(R)
    better, worse, none = idx([2, 6, 0]), idx([1, 5, 4]), idx([])
    margin = t([0.1, 0.2, 0.3])
    bt_sum = pairwise_loss(r, better, worse, margin=margin)
    assert davidson_loss(r, better, worse, none, none, 0.0, margin=margin).item() == pytest.approx(bt_sum.item())
    raw = torch.zeros((), dtype=torch.float64, requires_grad=True)
    loss = davidson_loss(r, better, worse, idx([0]), idx([1]), learned_nu(raw))
    loss.backward()
    nu = math.log(2)  # softplus(0)
    # d/dnu of the hand formula, by a central difference
    eps = 1e-6

    def hand(v):
        return sum(davidson_by_hand(R[a], R[b], v, False) for a, b in ((2, 1), (6, 5), (0, 4))) + davidson_by_hand(
            R[0], R[1], v, True
        )

    dnu = (hand(nu + eps) - hand(nu - eps)) / (2 * eps)
    assert raw.grad.item() == pytest.approx(dnu * 0.5, rel=1e-5)  # softplus'(0) = 1/2


def test_plackett_luce_by_hand_with_a_tie_and_a_pair():
    # group 0: four responses ranked 0, 1, 1, 2 (responses 1 and 2 tied); group 1: two ranked 1, 0
    r = t([0.5, -0.3, 0.9, 0.2, 1.1, -0.4])
    group, rank = idx([0, 0, 0, 0, 1, 1]), idx([0, 1, 1, 2, 1, 0])
    e = [math.exp(x) for x in r.tolist()]
    hand = (
        math.log(e[0] + e[1] + e[2] + e[3])
        - 0.5  # response 0 over all
        + math.log(e[1] + e[3])
        + 0.3  # response 1 over 3 only: not over its tie
        + math.log(e[2] + e[3])
        - 0.9  # response 2 over 3 only
        + math.log(e[5] + e[4])
        + 0.4  # group 1: response 5 (rank 0) over 4
    )
    assert plackett_luce_loss(r, group, rank).item() == pytest.approx(hand, abs=1e-12)


def test_plackett_luce_of_a_strict_ranking_is_the_product_of_sequential_choices_and_of_pairs_bradley_terry():
    r = t([0.3, -1.0, 2.2, 0.8, -0.1])
    order = [2, 0, 4, 3, 1]  # best first
    rank = idx([order.index(i) for i in range(5)])
    remaining, log_p = list(order), 0.0
    for i in order[:-1]:
        log_p += r[i].item() - math.log(sum(math.exp(r[j].item()) for j in remaining))
        remaining.remove(i)
    assert plackett_luce_loss(r, idx([0] * 5), rank).item() == pytest.approx(-log_p, abs=1e-12)
    pairs = t([0.4, 1.5, -0.2, 0.9])  # two pairs: (0 > 1), (3 > 2)
    got = plackett_luce_loss(pairs, idx([0, 0, 1, 1]), idx([0, 1, 1, 0]))
    assert got.item() == pytest.approx(bt(0.4 - 1.5) + bt(0.9 + 0.2), abs=1e-12)
