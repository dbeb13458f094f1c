"""Best-of-N with a PRM: score each of a problem's N candidate solutions by its steps, keep the highest, and count
how often the kept one has the right final answer.

A solution's step probabilities become one score by `aggregate`:

- "min": its weakest step, as Math-Shepherd (Wang et al. 2024) ranks solutions: one wrong step sinks a solution
  however sure the model is of the others.
- "product": the product of the steps' probabilities, the chance that every step is correct if the steps were
  independent, as "Let's Verify Step by Step" (Lightman et al. 2023) scores a solution. It falls with the number
  of steps, so it favours short solutions; plain floats suffice for the few dozen steps of a solution.
- "last": the last step's probability alone. A PRM reads each step with everything before it, so its last score
  is already a judgement of the whole solution; this is the PRM used as an outcome model.

`best_of_n` reports, over problems:
- `accuracy`: the share of problems whose picked solution (highest aggregate; of tied ones the first) is correct.
- `oracle`: the share with at least one correct candidate, the most any picker can reach.
- `chance`: the mean over problems of the share of correct candidates, what a uniformly random pick scores on
  average, the bar the PRM must clear (a majority vote needs the final answers themselves, which are not here).
- `n`: how many problems. With none, the three rates are None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

AGGREGATES = ("min", "product", "last")


@dataclass(frozen=True)
class Candidate:
    """One candidate solution of a problem."""

    step_probs: tuple[float, ...]
    """The PRM's probability that each step is correct, in step order (any sequence; kept as a tuple)."""
    correct: bool
    """Whether its final answer is right (what best-of-N is judged on, not its steps)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_probs", tuple(float(p) for p in self.step_probs))


def aggregate(step_probs: Sequence[float], how: str = "min") -> float:
    """One score for a solution from its steps' probabilities: "min", "product" or "last"."""
    if how not in AGGREGATES:
        raise ValueError(f"unknown aggregate {how!r}: one of {', '.join(AGGREGATES)}")
    if len(step_probs) == 0:
        raise ValueError("a solution with no step has no score")
    if not all(math.isfinite(p) for p in step_probs):  # a NaN would never win nor lose a comparison
        raise ValueError(f"a step probability is not finite: {list(step_probs)}")
    if how == "min":
        return float(min(step_probs))
    if how == "product":
        return float(math.prod(step_probs))
    return float(step_probs[-1])


def pick(candidates: Sequence[Candidate], how: str = "min") -> int:
    """The index of the candidate with the highest aggregate; of several tied at the highest, the first."""
    if not candidates:
        raise ValueError("no candidate to pick from")
    scores = [aggregate(c.step_probs, how) for c in candidates]
    best = 0
    for i, score in enumerate(scores):
        if score > scores[best]:  # strictly: a later tie does not replace the first
            best = i
    return best


def best_of_n(problems: Sequence[Sequence[Candidate]], how: str = "min") -> dict[str, float | int | None]:
    """{accuracy, oracle, chance, n} over `problems`, each a list of its candidates (see the module's docstring)."""
    if how not in AGGREGATES:  # checked here too, so that an empty list of problems does not hide it
        raise ValueError(f"unknown aggregate {how!r}: one of {', '.join(AGGREGATES)}")
    picked = oracle = 0
    chance = 0.0
    for i, candidates in enumerate(problems):
        if not candidates:
            raise ValueError(f"problem {i}: no candidate solution")
        try:
            chosen = pick(candidates, how)
        except ValueError as e:
            raise ValueError(f"problem {i}: {e}") from e
        picked += candidates[chosen].correct
        oracle += any(c.correct for c in candidates)
        chance += sum(c.correct for c in candidates) / len(candidates)
    n = len(problems)
    if n == 0:
        return {"accuracy": None, "oracle": None, "chance": None, "n": 0}
    return {"accuracy": picked / n, "oracle": oracle / n, "chance": chance / n, "n": n}
