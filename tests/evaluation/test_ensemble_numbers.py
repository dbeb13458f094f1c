"""The ensemble block's numbers (rm/evaluation/ensemble/ensemble_numbers.py) against values worked out by hand, with no
model: the mean, the std over members (ddof 0) and the conservative reward of each response, and the AUC of a pair's
uncertainty for the pairs the mean orders wrongly against those it orders right."""

import math

import numpy as np
import pytest

from rm.data.formats.pair import Pair
from rm.evaluation.ensemble.ensemble_numbers import combine, ensemble_block, spread, uncertainty_block
from rm.evaluation.eval_result import build_result


def test_mean_std_and_conservative_reward_by_hand():
    """Three members, two responses. Response 0: 1, 3, 5: mean 3, deviations -2, 0, 2, variance 8/3 (ddof 0).
    Response 1: 2, 6, 1: mean 3, deviations -1, 3, -2, variance 14/3. Conservative at k = 0.5: 3 - 0.5 std."""
    mean, std, conservative = combine(np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 1.0]]), k=0.5)
    assert mean.tolist() == [3.0, 3.0]
    assert std == pytest.approx([math.sqrt(8 / 3), math.sqrt(14 / 3)], abs=1e-15)
    assert conservative == pytest.approx([3 - 0.5 * math.sqrt(8 / 3), 3 - 0.5 * math.sqrt(14 / 3)], abs=1e-15)
    # A reward that is not finite in one member is not finite in all three (left out of the metrics, as one
    # model's NaN is).
    mean, std, conservative = combine(np.array([[1.0, np.nan], [2.0, 0.0]]), k=1.0)
    assert np.isfinite([mean[0], std[0], conservative[0]]).all()
    assert not np.isfinite([mean[1], std[1], conservative[1]]).any()


def test_members_that_agree_have_a_std_of_exactly_zero():
    """np.std of three equal floats is not always 0 (their mean is rounded): the ensemble's is, so that identical
    members give a conservative reward equal to the mean and an undefined uncertainty AUC."""
    same = np.full((3, 1), 0.1)
    assert np.std(same, axis=0)[0] != 0  # what a plain std gives: 1.4e-17
    assert spread(same)[0] == 0.0
    mean, std, conservative = combine(same, k=2.0)
    assert std[0] == 0.0 and conservative[0] == mean[0]


def pairs(n: int) -> list[Pair]:
    return [Pair(f"prompt {i}", "a", "b", "s", origin=f"f:{i}") for i in range(n)]


# Two members' margins r_chosen - r_rejected (rejected scored 0) on six pairs, and their mean:
#   A:    1   -1    2   -0.5  0.2   0.3
#   B:    1    0.5  1    0.3  0.4  -0.3
#   mean  1   -0.25 1.5 -0.1  0.3   0      -> wrong: pairs 1 and 3; right: 0, 2, 4; tied: 5
#   std   0    0.75 0.5  0.4  0.1   0.3    (|A - B| / 2 for two members)
# AUC of the std, wrong against right: 0.75 is above 0, 0.5 and 0.1 (3); 0.4 is above 0 and 0.1, below 0.5 (2):
# 5 of 6 comparisons.
MARGINS = {"A": [1, -1, 2, -0.5, 0.2, 0.3], "B": [1, 0.5, 1, 0.3, 0.4, -0.3]}


def rewards_of(margins: list[float]) -> list[np.ndarray]:
    return [np.array([m, 0.0]) for m in margins]


def test_the_uncertainty_auc_by_hand():
    members = [rewards_of(MARGINS["A"]), rewards_of(MARGINS["B"])]
    mean = [combine(np.stack([a, b]), 1.0)[0] for a, b in zip(*members, strict=True)]
    block = uncertainty_block(pairs(6), mean, members)
    assert block["auc"] == pytest.approx(5 / 6)
    assert (block["pairs_wrong"], block["pairs_right"], block["pairs_tied"]) == (2, 3, 1)
    assert block["mean_std_wrong"] == pytest.approx((0.75 + 0.4) / 2)
    assert block["mean_std_right"] == pytest.approx((0 + 0.5 + 0.1) / 3)
    assert block["note"] is None
    # Relative to the mean margin: std / |mean| is 3 and 4 on the wrong pairs, 0, 1/3 and 1/3 on the right: AUC 1.
    assert block["auc_relative"] == pytest.approx(1.0)
    # The members swapped: the same std and the same AUC (the std has no member order).
    assert uncertainty_block(pairs(6), mean, members[::-1])["auc"] == pytest.approx(5 / 6)


def test_an_undefined_auc_is_none_with_a_note():
    same = [rewards_of(MARGINS["A"])] * 3
    mean = [combine(np.stack([r] * 3), 1.0)[0] for r in same[0]]
    block = uncertainty_block(pairs(6), mean, same)
    assert block["auc"] is None and "same std over members (0)" in block["note"]
    assert block["mean_std_wrong"] == 0.0 and (block["pairs_wrong"], block["pairs_right"]) == (2, 4)
    right = [rewards_of([1, 2, 3])] * 2
    block = uncertainty_block(pairs(3), [combine(np.stack([r] * 2), 1.0)[0] for r in right[0]], right)
    assert block["auc"] is None and "orders no pair wrongly" in block["note"]
    assert block["pairs_wrong"] == 0 and block["mean_std_wrong"] is None


def test_the_block_reads_each_model_as_rm_eval_reads_one():
    """Each member's accuracy and interval are those `build_result` (what `rm eval` writes for one model) gives its
    rewards; the conservative reward's those of mean - k std; the merged model's its own."""
    items = pairs(6)
    members = [rewards_of(MARGINS["A"]), rewards_of(MARGINS["B"])]
    stacks = [np.stack([a, b]) for a, b in zip(*members, strict=True)]
    mean, std, conservative = (list(x) for x in zip(*(combine(s, 2.0) for s in stacks), strict=True))
    merged = rewards_of([1, 1, 1, 1, -1, -1])
    result = build_result(items, mean, samples=50, seed=3)
    block = ensemble_block(items, ["A", "B"], members, (mean, std, conservative), result, 2.0, 50, 3, ("M", merged))
    for name, rewards, got in [("A", members[0], block["members"][0]), ("B", members[1], block["members"][1]),
                               ("M", merged, block["merged"])]:  # fmt: skip
        want = build_result(items, rewards, samples=50, seed=3)["overall"]
        assert got["model"] == name
        assert got["overall"] == {"accuracy": want["accuracy"], "accuracy_ci95": want["accuracy_ci95"], "n": 6}
    assert block["members"][0]["overall"]["accuracy"] == 4 / 6  # A's margins: 4 of 6 positive
    assert block["merged"]["overall"]["accuracy"] == 4 / 6
    assert block["mean"]["overall"]["accuracy"] == pytest.approx((3 + 0.5) / 6)  # the tie counts half
    # Conservative at k = 2: each response's mean - 2 std. A pair's rejected response scores 0 in both members
    # (std 0), so it is right where mean(chosen) - 2 std(chosen) > 0: pairs 0 (1 - 0), 2 (1.5 - 2 x 0.5 = 0.5)
    # and 4 (0.3 - 2 x 0.1 = 0.1); pair 1 (-0.25 - 1.5), 3 (-0.1 - 0.8) and 5 (0 - 0.6) are wrong.
    assert block["conservative"]["k"] == 2.0 and block["conservative"]["overall"]["accuracy"] == pytest.approx(3 / 6)
    assert block["reward_std"]["max"] == pytest.approx(0.75)
