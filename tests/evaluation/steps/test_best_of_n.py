"""Best-of-N with a PRM (rm/evaluation/steps/best_of_n.py) by hand: the three aggregates, the first of tied
candidates, and accuracy beside the oracle and chance bars on problems where the aggregates pick differently."""

import math

import pytest

from rm.evaluation.steps.best_of_n import Candidate, aggregate, best_of_n, pick


def test_aggregates_by_hand():
    steps = [0.9, 0.5, 0.8]
    assert aggregate(steps, "min") == 0.5
    assert aggregate(steps, "product") == pytest.approx(0.36)  # 0.9 * 0.5 * 0.8
    assert aggregate(steps, "last") == 0.8
    assert aggregate(steps) == 0.5  # min by default


def test_aggregate_refuses_what_has_no_score():
    with pytest.raises(ValueError, match="unknown aggregate 'mean'"):
        aggregate([0.5], "mean")
    with pytest.raises(ValueError, match="no step"):
        aggregate([], "min")
    with pytest.raises(ValueError, match="not finite"):
        aggregate([0.9, math.nan], "last")


def test_pick_keeps_the_first_of_tied_candidates():
    tied = [Candidate((0.6, 0.5), False), Candidate((0.5, 0.9), True)]  # both min 0.5
    assert pick(tied, "min") == 0
    assert pick(tied, "last") == 1  # 0.5 against 0.9: a strictly higher later one does win
    assert pick([Candidate((0.2,), True), Candidate((0.7,), False), Candidate((0.7,), True)], "min") == 1


# P1: the three aggregates pick three different candidates, only "min" the correct one
#   A (0.9, 0.6)      wrong: min 0.6, product 0.54, last 0.6
#   B (0.7, 0.7, 0.7) right: min 0.7, product 0.343, last 0.7
#   C (0.5, 0.95)     wrong: min 0.5, product 0.475, last 0.95
#   min -> B (right), product -> A (wrong), last -> C (wrong)
# P2: A and B tie on every aggregate (0.8); the first, A, is right
# P3: both wrong, A picked: nothing to gain
PROBLEMS = [
    [Candidate((0.9, 0.6), False), Candidate((0.7, 0.7, 0.7), True), Candidate((0.5, 0.95), False)],
    [Candidate((0.8,), True), Candidate((0.8,), False)],
    [Candidate((0.3,), False), Candidate((0.2,), False)],
]


def test_best_of_n_by_hand():
    by_min = best_of_n(PROBLEMS, "min")
    assert by_min["accuracy"] == pytest.approx(2 / 3)  # P1 right, P2 right, P3 wrong
    assert best_of_n(PROBLEMS, "product")["accuracy"] == pytest.approx(1 / 3)  # only P2
    assert best_of_n(PROBLEMS, "last")["accuracy"] == pytest.approx(1 / 3)  # only P2
    assert by_min["oracle"] == pytest.approx(2 / 3)  # P1 and P2 have a right candidate, P3 none
    # chance: P1 1/3, P2 1/2, P3 0 -> (1/3 + 1/2 + 0) / 3 = (5/6) / 3 = 5/18
    assert by_min["chance"] == pytest.approx(5 / 18)
    assert by_min["n"] == 3
    assert best_of_n(PROBLEMS, "last")["chance"] == by_min["chance"]  # the bars do not depend on the aggregate


def test_no_problem_gives_no_rates():
    assert best_of_n([]) == {"accuracy": None, "oracle": None, "chance": None, "n": 0}
    with pytest.raises(ValueError, match="unknown aggregate"):
        best_of_n([], "mean")


def test_an_empty_problem_or_solution_names_the_problem():
    with pytest.raises(ValueError, match="problem 1: no candidate"):
        best_of_n([[Candidate((0.9,), True)], []])
    with pytest.raises(ValueError, match="problem 0: a solution with no step"):
        best_of_n([[Candidate((), True)]])
