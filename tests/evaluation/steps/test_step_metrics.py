"""Step-level accuracy and ROC AUC (rm/evaluation/steps/step_metrics.py) by hand, the AUC also against a loop over
every (correct, wrong) pair, and the checks that name the solution whose lengths or values are wrong."""

import math
import random

import pytest

from rm.evaluation.steps.step_metrics import step_accuracy, step_auc, step_scores

PROBS = [[0.9, 0.4], [0.5, 0.2, 0.7]]
LABELS = [[True, True], [1.0, 0.3, 0.5]]  # hard and soft labels mixed


def test_accuracy_by_hand_with_both_cuts_at_their_boundary():
    # predicted (prob >= 0.5): correct, wrong, correct (0.5), wrong, correct
    # class (label >= 0.5):    correct, correct, correct, wrong (0.3), correct (0.5)
    # matches: yes, no, yes, yes, yes -> 4 / 5
    assert step_accuracy(PROBS, LABELS) == pytest.approx(0.8)


def test_auc_by_hand_with_a_tie():
    # LABELS' classes make the correct steps' probabilities 0.9, 0.4, 0.5, 0.7 and the one wrong step's 0.2:
    # every correct step beats it, 4 of 4 pairs
    assert step_auc(PROBS, LABELS) == 1.0
    probs = [[0.9, 0.4], [0.4, 0.2, 0.7]]
    labels = [[1, 1], [0, 0, 1]]
    # correct: 0.9, 0.4, 0.7; wrong: 0.4, 0.2. Pairs (correct, wrong):
    # (0.9, 0.4) 1, (0.9, 0.2) 1, (0.4, 0.4) tie 1/2, (0.4, 0.2) 1, (0.7, 0.4) 1, (0.7, 0.2) 1 -> 5.5 / 6
    assert step_auc(probs, labels) == pytest.approx(11 / 12)


def test_auc_is_one_for_a_perfect_order_and_zero_for_the_reverse():
    assert step_auc([[0.9, 0.1], [0.8]], [[1, 0], [1]]) == 1.0
    assert step_auc([[0.1, 0.9], [0.2]], [[1, 0], [1]]) == 0.0  # both correct steps (0.1, 0.2) below the wrong 0.9
    assert step_auc([[0.3, 0.3]], [[1, 0]]) == 0.5  # one pair, tied


def pairs_auc(probs: list[float], correct: list[bool]) -> float:
    pos = [p for p, c in zip(probs, correct, strict=True) if c]
    neg = [p for p, c in zip(probs, correct, strict=True) if not c]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


def test_auc_against_every_pair_on_random_solutions_with_ties():
    rng = random.Random(3)
    for _ in range(30):
        solutions = [rng.randint(1, 6) for _ in range(rng.randint(1, 5))]
        probs = [[rng.choice([0.1, 0.3, 0.5, 0.7, 0.9]) for _ in range(n)] for n in solutions]  # ties are common
        labels = [[rng.random() for _ in range(n)] for n in solutions]  # soft: the class is label >= 0.5
        flat_p = [p for s in probs for p in s]
        flat_c = [y >= 0.5 for s in labels for y in s]
        expected = pairs_auc(flat_p, flat_c) if 0 < sum(flat_c) < len(flat_c) else None
        got = step_auc(probs, labels)
        assert got == pytest.approx(expected) if expected is not None else got is None


def test_one_class_has_no_auc_and_no_steps_no_accuracy():
    assert step_auc([[0.9, 0.2]], [[True, True]]) is None
    assert step_auc([[0.9], [0.2]], [[0.0], [0.4]]) is None  # both soft labels below 0.5: one class
    assert step_auc([], []) is None
    assert step_accuracy([], []) is None
    assert step_accuracy([[]], [[]]) is None  # a solution of no step adds nothing


def test_step_scores_holds_both_and_their_counts():
    s = step_scores(PROBS, LABELS)
    assert s["n_steps"] == 5 and s["n_correct_steps"] == 4  # classes: correct, correct, correct, wrong, correct
    assert s["step_accuracy"] == pytest.approx(0.8) and s["step_auc"] == 1.0
    assert step_scores([], []) == {"step_accuracy": None, "step_auc": None, "n_steps": 0, "n_correct_steps": 0}


def test_mismatched_lengths_name_the_solution():
    with pytest.raises(ValueError, match=r"solution 1: 3 step probabilities but 2 step labels"):
        step_accuracy([[0.9], [0.1, 0.2, 0.3]], [[1], [1, 0]])
    with pytest.raises(ValueError, match=r"solution 0: 1 step probabilities but 2 step labels"):
        step_auc([[0.9]], [[1, 0]])
    with pytest.raises(ValueError, match="2 solutions of step probabilities but 1 of step labels"):
        step_accuracy([[0.9], [0.1]], [[1]])


def test_bad_values_name_the_solution():
    with pytest.raises(ValueError, match="solution 1: a step probability is not finite"):
        step_accuracy([[0.9], [math.nan]], [[1], [1]])
    with pytest.raises(ValueError, match=r"solution 0: a step label is outside \[0, 1\]"):
        step_auc([[0.9, 0.1]], [[1.5, 0]])
    with pytest.raises(ValueError, match="solution 0: a step label is outside"):
        step_auc([[0.9, 0.1]], [[math.nan, 0]])
