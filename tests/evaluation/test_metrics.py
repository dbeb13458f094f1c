"""Metrics against values worked out by hand on small fixed reward sets."""

import math

import numpy as np
import pytest

from rm.evaluation import metrics

# Four pairs used by several tests: rewards, and response lengths in characters.
CHOSEN, REJECTED = [2.0, 1.0, 0.5, 3.0], [1.0, 1.0, 1.0, 0.0]
LEN_C, LEN_R = [10, 5, 7, 3], [5, 10, 7, 1]


def test_accuracy_counts_a_tie_as_half():
    """Pairs: 2>1 right, 1=1 tie, 0.5<1 wrong, 3>0 right -> (1 + 0.5 + 0 + 1) / 4 = 0.625."""
    assert metrics.correct(CHOSEN, REJECTED).tolist() == [1.0, 0.5, 0.0, 1.0]
    s = metrics.pair_summary(CHOSEN, REJECTED, LEN_C, LEN_R, samples=200)
    assert s["accuracy"] == 0.625 and s["n"] == 4
    assert s["mean_margin"] == pytest.approx((1 + 0 - 0.5 + 3) / 4)


def test_p_chosen_is_the_bradley_terry_sigmoid():
    assert metrics.p_chosen([math.log(3)], [0.0])[0] == pytest.approx(0.75)
    assert metrics.p_chosen([0.0], [800.0])[0] == 0.0  # no overflow warning or nan for huge gaps


def test_ece_on_a_hand_worked_set():
    """Six pairs with P(chosen) = .93, .93, .07, .72, .28, .5; 10 bins of width .05 on [.5, 1].

    Confidence max(P, 1-P): .93 (x3, bin 8), .72 (x2, bin 4), .5 (bin 0).
    bin 8: accuracy 2/3 (the .07 pair is wrong), |2/3 - .93| = .263333, weight 3/6
    bin 4: accuracy 1/2 (.28 is wrong),          |1/2 - .72| = .22,     weight 2/6
    bin 0: a tie, accuracy .5,                   |.5 - .5|   = 0,       weight 1/6
    ECE = .5 * .263333 + .333333 * .22 = .205
    """
    p = np.array([0.93, 0.93, 0.07, 0.72, 0.28, 0.5])
    diff = np.log(p / (1 - p))  # rewards whose sigmoid gap is exactly p
    chosen, rejected = diff, np.zeros_like(diff)
    assert metrics.ece(chosen, rejected) == pytest.approx(0.205, abs=1e-9)
    bins = metrics.calibration_bins(chosen, rejected)
    assert [b["n"] for b in bins] == [1, 0, 0, 0, 2, 0, 0, 0, 3, 0]
    assert bins[8]["confidence"] == pytest.approx(0.93) and bins[8]["accuracy"] == pytest.approx(2 / 3)
    assert bins[4]["lo"] == pytest.approx(0.7) and bins[4]["hi"] == pytest.approx(0.75)


def test_a_calibrated_model_has_small_ece_and_a_confident_wrong_one_large():
    rng = np.random.default_rng(0)
    diff = rng.normal(0, 2, 20000)
    # Outcomes drawn from the model's own probabilities: calibrated by construction.
    won = rng.random(20000) < 1 / (1 + np.exp(-diff))
    chosen, rejected = np.where(won, diff, -diff), np.zeros(20000)  # orient so chosen is the winner
    assert metrics.ece(chosen, rejected) < 0.02
    # Always wrong with confidence sigmoid(10): ECE = |0 - sigmoid(10)|.
    assert metrics.ece([-10.0, -10.0], [0.0, 0.0]) == pytest.approx(1 / (1 + math.exp(-10)))


def test_bootstrap_interval_is_reproducible_and_matches_the_binomial():
    """15 right out of 20: the bootstrap mean is Binomial(20, .75) / 20, whose 2.5% and 97.5% quantiles
    are computed exactly below; a 20,000-resample interval lands within one step (1/20) of them."""
    values = np.array([1.0] * 15 + [0.0] * 5)
    a = metrics.bootstrap_ci(values, samples=20000, seed=3)
    assert a == metrics.bootstrap_ci(values, samples=20000, seed=3)

    def binom_quantile(q):
        cdf = 0.0
        for k in range(21):
            cdf += math.comb(20, k) * 0.75**k * 0.25 ** (20 - k)
            if cdf >= q:
                return k / 20

    assert binom_quantile(0.025) == 0.55 and binom_quantile(0.975) == 0.90  # the exact reference
    assert a[0] == pytest.approx(0.55, abs=0.05 + 1e-9)
    assert a[1] == pytest.approx(0.90, abs=0.05 + 1e-9)


def test_bootstrap_seed_changes_draws_and_degenerate_sets():
    values = np.array([1.0, 0.0, 0.5, 1.0, 1.0, 0.0, 1.0])
    draws = {metrics.bootstrap_ci(values, samples=50, seed=s) for s in range(10)}
    assert len(draws) > 1  # the seed is really used
    assert metrics.bootstrap_ci([1.0] * 9) == (1.0, 1.0)
    assert metrics.bootstrap_ci([0.5]) == (0.5, 0.5)
    assert all(math.isnan(x) for x in metrics.bootstrap_ci([]))


def test_length_baseline_and_bias_on_four_pairs():
    """Lengths (10,5), (5,10), (7,7), (3,1): chosen longer, shorter, equal, longer -> baseline
    (1 + 0 + .5 + 1) / 4 = .625. Model correctness 1, .5, 0, 1 (see the accuracy test):
    chosen longer (pairs 0, 3): 1.0; chosen shorter (pair 1): .5.
    Prefers longer, over the unequal pairs 0, 1, 3: 1, 1 - .5, 1 -> 2.5 / 3.
    Reward-length Spearman over the 8 responses: length ranks [7.5 3.5 5.5 2 3.5 7.5 5.5 1], reward ranks
    [7 4.5 2 8 4.5 4.5 4.5 1]; centred products sum to 8.5, squares to 40.5 and 37: 8.5 / sqrt(40.5 * 37).
    """
    b = metrics.length_bias(CHOSEN, REJECTED, LEN_C, LEN_R)
    assert b["longer_chosen_rate"] == 0.625
    assert b["length_rule"] == "longer wins" and b["length_rule_accuracy"] == 0.625
    flipped = metrics.length_bias(CHOSEN, REJECTED, LEN_R, LEN_C)  # now the chosen one is mostly shorter
    assert flipped["length_rule"] == "shorter wins" and flipped["length_rule_accuracy"] == 0.625
    assert flipped["longer_chosen_rate"] == 0.375
    assert b["accuracy_chosen_longer"] == 1.0 and b["n_chosen_longer"] == 2
    assert b["accuracy_chosen_shorter"] == 0.5 and b["n_chosen_shorter"] == 1
    assert b["prefers_longer_rate"] == pytest.approx(2.5 / 3)
    assert b["reward_length_spearman"] == pytest.approx(8.5 / math.sqrt(40.5 * 37))


def test_length_diff_bins():
    """Differences -30 -20 -10 10 20 30 in two quantile bins: edges -30, 0, 30."""
    len_c = [0, 0, 0, 40, 40, 40]
    len_r = [30, 20, 10, 30, 20, 10]
    chosen = [1.0, -1.0, 1.0, 1.0, 1.0, -1.0]
    rejected = [0.0] * 6
    bins = metrics.length_diff_bins(chosen, rejected, len_c, len_r, n_bins=2)
    assert [(b["lo"], b["hi"], b["n"]) for b in bins] == [(-30, 0, 3), (0, 30, 3)]
    assert bins[0]["accuracy"] == pytest.approx(2 / 3) and bins[1]["accuracy"] == pytest.approx(2 / 3)
    assert bins[0]["longer_chosen_rate"] == 0.0 and bins[1]["longer_chosen_rate"] == 1.0
    same = metrics.length_diff_bins([1.0], [0.0], [5], [5])
    assert len(same) == 1 and same[0]["n"] == 1


def test_rankdata_averages_ties():
    assert metrics.rankdata([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert metrics.rankdata([3, 3, 3]).tolist() == [2.0, 2.0, 2.0]


def test_spearman_by_hand():
    """x = 1..5, y = 5 6 7 8 7: y ranks 1 2 3.5 5 3.5; centred x -2 -1 0 1 2, centred y -2 -1 .5 2 .5;
    sum of products 8, of squares 10 and 9.5: rho = 8 / sqrt(95)."""
    assert metrics.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert metrics.spearman([1, 2, 3], [10, 200, 3000]) == pytest.approx(1.0)  # ranks, not values
    assert metrics.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(metrics.spearman([1, 2, 3], [4, 4, 4]))
    assert math.isnan(metrics.spearman([1], [2]))
    with pytest.raises(ValueError, match="lengths differ"):
        metrics.spearman([1, 2], [1])


def test_json_safe_replaces_nan():
    assert metrics.json_safe({"a": [1.0, float("nan")], "b": {"c": float("nan")}}) == {
        "a": [1.0, None],
        "b": {"c": None},
    }
