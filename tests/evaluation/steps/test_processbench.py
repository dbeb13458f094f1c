"""ProcessBench's metric (rm/evaluation/steps/processbench.py) on items worked out by hand: the first step judged
wrong, the exact-match accuracies, their harmonic mean, the undefined sides, and the detection F1 kept apart."""

import math

import pytest

from rm.evaluation.steps.processbench import (
    ProcessBenchItem,
    error_detection_prf,
    first_error,
    processbench_scores,
)


def item(split: str, label: int, *probs: float) -> ProcessBenchItem:
    return ProcessBenchItem(split=split, label=label, step_probs=probs)


# gsm8k: predictions are the first step below 0.5
GSM8K = [
    item("gsm8k", 1, 0.9, 0.2, 0.1),  # predicted 1 == label: right
    item("gsm8k", 2, 0.8, 0.3, 0.1),  # predicted 1, one step too early: wrong
    item("gsm8k", 0, 0.9, 0.9),  # predicted -1, error missed: wrong
    item("gsm8k", -1, 0.7, 0.8),  # predicted -1: right
    item("gsm8k", -1, 0.6, 0.4),  # predicted 1 on a correct solution: wrong
]
MATH = [
    item("math", 0, 0.1),  # predicted 0: right
    item("math", -1, 0.9, 0.95),  # predicted -1: right
]


def test_first_error_is_the_first_step_below_the_threshold():
    assert first_error([0.9, 0.6, 0.3, 0.1]) == 2  # 0.3 is the first below 0.5
    assert first_error([0.9, 0.5]) == -1  # 0.5 is not below 0.5: judged correct
    assert first_error([0.9, 0.6], threshold=0.7) == 1  # 0.6 < 0.7
    assert first_error([0.2, 0.9]) == 0
    assert first_error([]) == -1  # no step, none judged wrong


def test_a_nan_step_is_refused_rather_than_read_as_correct():
    with pytest.raises(ValueError, match="step 1"):
        first_error([0.9, math.nan, 0.1])


def test_two_splits_by_hand():
    scores = processbench_scores(GSM8K + MATH)
    gsm8k, math_split = scores["splits"]["gsm8k"], scores["splits"]["math"]
    # gsm8k: erroneous items right 1 of 3, correct items right 1 of 2
    assert (gsm8k["n_erroneous"], gsm8k["n_correct"]) == (3, 2)
    assert gsm8k["erroneous_acc"] == pytest.approx(1 / 3)
    assert gsm8k["correct_acc"] == pytest.approx(1 / 2)
    # F1 = 2 * (1/3) * (1/2) / (1/3 + 1/2) = (1/3) / (5/6) = 2/5
    assert gsm8k["f1"] == pytest.approx(0.4)
    # math: 1 of 1 on each side, F1 = 2 * 1 * 1 / 2 = 1
    assert (math_split["erroneous_acc"], math_split["correct_acc"], math_split["f1"]) == (1.0, 1.0, 1.0)
    assert (math_split["n_erroneous"], math_split["n_correct"]) == (1, 1)
    # unweighted over splits: (0.4 + 1.0) / 2 = 0.7; pooling the items would give accuracies 2/4 and 2/3, F1 4/7
    assert scores["average_f1"] == pytest.approx(0.7)
    assert list(scores["splits"]) == ["gsm8k", "math"]  # the order they first appear


def test_splits_keep_the_order_they_first_appear():
    assert list(processbench_scores(MATH + GSM8K)["splits"]) == ["math", "gsm8k"]


def test_the_threshold_moves_the_prediction():
    late = [item("gsm8k", 2, 0.8, 0.3, 0.1)]
    assert processbench_scores(late)["splits"]["gsm8k"]["erroneous_acc"] == 0.0  # 0.3 < 0.5: predicted 1
    # at 0.25, 0.3 passes and 0.1 is the first below: predicted 2 == label
    assert processbench_scores(late, threshold=0.25)["splits"]["gsm8k"]["erroneous_acc"] == 1.0


def test_calling_everything_correct_scores_zero():
    """The reason for the harmonic mean: correct_acc 1 and erroneous_acc 0 give F1 0, not 0.5."""
    lenient = [item("s", 1, 0.9, 0.9), item("s", -1, 0.9, 0.9)]
    s = processbench_scores(lenient)["splits"]["s"]
    assert (s["erroneous_acc"], s["correct_acc"], s["f1"]) == (0.0, 1.0, 0.0)


def test_both_accuracies_zero_give_f1_zero_not_an_error():
    wrong_both = [item("s", 0, 0.9), item("s", -1, 0.1)]  # predicted -1 on the erroneous, 0 on the correct
    s = processbench_scores(wrong_both)["splits"]["s"]
    assert (s["erroneous_acc"], s["correct_acc"], s["f1"]) == (0.0, 0.0, 0.0)


def test_a_split_with_one_side_only_has_no_f1_and_no_average():
    only_correct = [item("easy", -1, 0.9), item("easy", -1, 0.2)]  # right 1 of 2
    scores = processbench_scores(only_correct + MATH)
    easy = scores["splits"]["easy"]
    assert easy["erroneous_acc"] is None and easy["n_erroneous"] == 0
    assert easy["correct_acc"] == 0.5 and easy["n_correct"] == 2
    assert easy["f1"] is None
    assert scores["splits"]["math"]["f1"] == 1.0  # the other split keeps its numbers
    assert scores["average_f1"] is None  # not math's 1.0 alone
    only_erroneous = processbench_scores([item("hard", 0, 0.1)])["splits"]["hard"]
    assert (only_erroneous["erroneous_acc"], only_erroneous["correct_acc"], only_erroneous["f1"]) == (1.0, None, None)


def test_no_items_give_no_splits_and_no_average():
    assert processbench_scores([]) == {"splits": {}, "average_f1": None}


def test_labels_outside_the_steps_are_refused():
    with pytest.raises(ValueError, match="label 3"):
        item("s", 3, 0.9, 0.9, 0.9)  # 3 steps: indices 0..2
    with pytest.raises(ValueError, match="label -2"):
        item("s", -2, 0.9)
    assert item("s", 2, 0.9, 0.9, 0.1).step_probs == (0.9, 0.9, 0.1)  # the last step is a valid label, kept a tuple


def test_detection_prf_is_a_different_number():
    """gsm8k's items: flagged (a step below 0.5) are items 1, 2 and 5; erroneous are items 1, 2 and 3.
    tp = 2 (items 1, 2: item 2 flagged one step early still counts), fp = 1 (item 5), fn = 1 (item 3)."""
    d = error_detection_prf(GSM8K)
    assert (d["detection_tp"], d["detection_fp"], d["detection_fn"]) == (2, 1, 1)
    assert d["detection_precision"] == pytest.approx(2 / 3)  # 2 / (2 + 1)
    assert d["detection_recall"] == pytest.approx(2 / 3)  # 2 / (2 + 1)
    assert d["detection_f1"] == pytest.approx(2 / 3)  # the harmonic mean of two equal numbers is that number
    assert processbench_scores(GSM8K)["splits"]["gsm8k"]["f1"] == pytest.approx(0.4)  # the benchmark's: lower
    assert "f1" not in d  # prefixed, so merging it into a ProcessBench dict overwrites nothing


def test_detection_prf_undefined_sides():
    nothing_flagged = error_detection_prf([item("s", -1, 0.9), item("s", 0, 0.9)])
    # tp = fp = 0: precision undefined; recall 0 / (0 + 1) = 0
    assert nothing_flagged["detection_precision"] is None
    assert nothing_flagged["detection_recall"] == 0.0
    assert nothing_flagged["detection_f1"] is None
    no_errors = error_detection_prf([item("s", -1, 0.1)])  # fp = 1: precision 0 / 1; no erroneous item: no recall
    assert (no_errors["detection_precision"], no_errors["detection_recall"]) == (0.0, None)
    both_zero = error_detection_prf([item("s", -1, 0.1), item("s", 0, 0.9)])  # tp 0, fp 1, fn 1
    assert (both_zero["detection_precision"], both_zero["detection_recall"], both_zero["detection_f1"]) == (0, 0, 0)
