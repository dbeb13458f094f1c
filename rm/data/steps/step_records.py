"""One solution of stepwise (process-reward) data, whatever layout it was published in.

Each loader (`step_formats.py`) turns its dataset's record into a `StepSolution`, so what comes after (encoding,
the loss, the metrics of rm/evaluation/steps/) reads one shape: a prompt, the solution's steps in order and one
label per step in [0, 1] (True -> 1.0, False -> 0.0, a soft label as given).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

CORRECT_AT = 0.5
"""A step whose label (or predicted probability) is at least this is a correct step; below it, a wrong one."""


@dataclass(frozen=True)
class StepSolution:
    """A solution to one problem, step by step, each step with the probability that it is correct."""

    prompt: str
    """The problem, as the dataset gives it (no chat template applied)."""
    steps: tuple[str, ...]
    """The solution's steps in order, none empty."""
    labels: tuple[float, ...]
    """One per step, in [0, 1]: 1.0 a correct step, 0.0 a wrong one, anything between a soft target."""
    origin: str
    """Where the record was read: "file:line"."""


def group_by_prompt(solutions: Iterable[StepSolution]) -> list[tuple[str, list[StepSolution]]]:
    """The solutions of each problem (same prompt text) together, problems in the order first seen and solutions
    in their own order, so that a problem's prompt is encoded once for all its solutions."""
    groups: dict[str, list[StepSolution]] = {}
    for solution in solutions:
        groups.setdefault(solution.prompt, []).append(solution)
    return list(groups.items())
