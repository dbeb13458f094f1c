"""Group metrics (rm/evaluation/ranking_metrics.py) by hand on a small group, against loops written here, and equal
to the pairwise report's numbers for groups of two."""

import math
import random

import numpy as np
import pytest

from rm.evaluation.metrics import bootstrap_ci, pair_summary
from rm.evaluation.ranking_metrics import group_scores, group_summary, score_groups


def test_one_group_by_hand():
    g = group_scores(np.array([2.0, 1.0, 1.5, 3.0]), np.array([0, 1, 1, 2]))
    # strict pairs (better first): 0>1 right, 0>2 right, 0>3 wrong, 1>3 wrong, 2>3 wrong; 1 and 2 tie
    assert (g["right"], g["strict"], g["ties"]) == (2.0, 5, 1)
    assert g["top1"] == 0.0  # the highest reward (3.0) went to the worst response
    assert g["best_of_k"] == 0.0
    assert g["tau"] == pytest.approx(-1 / math.sqrt(30))  # C - D = -1; 6 pairs, none tied in reward, 1 in rank
    assert g["tie_gap"] == pytest.approx(0.5) and g["strict_gap"] == pytest.approx(1 + 0.5 + 1 + 2 + 1.5)


def tau_b_loops(r, q):
    concordant = discordant = tied_r = tied_q = n = 0
    for i in range(len(r)):
        for j in range(i + 1, len(r)):
            n += 1
            x, y = r[i] - r[j], q[j] - q[i]  # a lower rank is better
            tied_r += x == 0
            tied_q += y == 0
            concordant += x * y > 0
            discordant += x * y < 0
    return (concordant - discordant) / math.sqrt((n - tied_r) * (n - tied_q))


def test_tau_top1_and_best_of_k_against_loops_on_random_groups_with_ties():
    rng = random.Random(5)
    for _ in range(50):
        k = rng.randint(2, 7)
        r = [float(rng.randint(0, 4)) for _ in range(k)]  # reward ties too
        q = [rng.randint(0, 3) for _ in range(k)]
        if len(set(q)) < 2 or len(set(r)) < 2:
            continue
        g = group_scores(np.array(r), np.array(q))
        assert g["tau"] == pytest.approx(tau_b_loops(r, q))
        top = [i for i in range(k) if r[i] == max(r)]
        assert g["top1"] == pytest.approx(sum(q[i] == min(q) for i in top) / len(top))
        best = [r[i] for i in range(k) if q[i] == min(q)]
        others = [r[i] for i in range(k) if q[i] != min(q)]
        assert g["best_of_k"] == float(min(best) > max(others))


def test_groups_of_mixed_sizes_scored_together_as_each_alone():
    """score_groups scores every group at once (segments of one flat array, sizes taken in turn): each group's row
    must be what it gets scored alone, whatever its neighbours, with explicit pairs where a group gives them."""
    rng = random.Random(9)
    rewards, ranks, pairs = [], [], []
    for i in range(40):
        k = rng.randint(2, 6)
        rewards.append(np.array([float(rng.randint(0, 3)) for _ in range(k)]))
        ranks.append(np.array([0] + [rng.randint(0, 3) for _ in range(k - 2)] + [3]))
        pairs.append(np.array([[k - 1, 0, 0], [0, 1, 1]]) if i % 4 == 0 else None)
    together = score_groups(rewards, ranks, pairs)
    for i, (r, q, p) in enumerate(zip(rewards, ranks, pairs, strict=True)):
        alone = group_scores(r, q, p)
        for key, value in alone.items():
            assert together[key][i] == pytest.approx(value, nan_ok=True), (i, key)
        if p is None:  # and by hand: the strict pairs of the ranking, ties apart
            pairs_of = [(a, b) for a in range(len(q)) for b in range(len(q)) if q[a] < q[b]]
            right = sum(1.0 if r[a] > r[b] else 0.5 if r[a] == r[b] else 0.0 for a, b in pairs_of)
            assert (alone["right"], alone["strict"]) == (right, len(pairs_of))
        else:  # response k-1 declared better than response 0, 0 tied with 1
            assert alone["strict"] == 1 and alone["ties"] == 1 and alone["tie_gap"] == abs(r[0] - r[1])
            assert alone["right"] == (1.0 if r[-1] > r[0] else 0.5 if r[-1] == r[0] else 0.0)


def test_groups_of_two_give_the_pairwise_accuracy_and_interval_exactly():
    rng = np.random.default_rng(0)
    chosen, rejected = rng.normal(size=300), rng.normal(size=300)
    rejected[:10] = chosen[:10]  # reward ties count one half in both
    got = group_summary([np.array([c, r]) for c, r in zip(chosen, rejected, strict=True)], [np.array([0, 1])] * 300)
    want = pair_summary(chosen, rejected, np.ones(300), np.ones(300))
    assert got["accuracy"] == want["accuracy"] and got["accuracy_ci95"] == want["accuracy_ci95"]
    assert got["n"] == got["prompts"] == 300


def test_the_interval_resamples_prompts_not_pairs():
    """50 groups of 4 strictly ranked responses, each either all right or all wrong: the pairs of one prompt move
    together, so the interval over prompts is wider than one over the 300 pairs as if independent."""
    rewards = [np.array([3.0, 2.0, 1.0, 0.0]) * (1 if i % 3 else -1) for i in range(50)]
    summary = group_summary(rewards, [np.array([0, 1, 2, 3])] * 50)
    pairs_right = np.repeat([1.0 if i % 3 else 0.0 for i in range(50)], 6)
    lo, hi = summary["accuracy_ci95"]
    plo, phi = bootstrap_ci(pairs_right)
    assert summary["accuracy"] == pytest.approx(pairs_right.mean())
    assert lo <= summary["accuracy"] <= hi and (hi - lo) > 1.8 * (phi - plo)
