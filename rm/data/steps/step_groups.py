"""A problem's stepwise solutions as one `Group`: the prompt computed once for all of them, as K responses are.

The texts are what the model reads (rm/tokens/steps/step_tokens.py): the problem followed by `data.step_separator`,
then each solution's steps, each followed by it. The group's ranks order its solutions by outcome, a solution
whose every step is judged correct (label >= 0.5) above one with a wrong step, so that a pairwise or group loss
can be added to the step loss (`loss.step_preference_coef`); solutions of equal outcome tie.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rm.data.formats.group import Group
from rm.data.steps.step_records import CORRECT_AT, StepSolution, group_by_prompt


def outcome_rank(labels: tuple[float, ...]) -> int:
    """0 for a solution whose every step is correct, 1 for one with a wrong step."""
    return int(min(labels) < CORRECT_AT)


def step_groups(solutions: Iterable[StepSolution], subset: str, separator: str) -> list[Group]:
    """One group per problem (same prompt text), its solutions in their order, named by its first one's origin."""
    groups = []
    for prompt, members in group_by_prompt(solutions):
        pieces = tuple(tuple(step + separator for step in s.steps) for s in members)
        groups.append(
            Group(
                prompt + separator,
                tuple("".join(p) for p in pieces),
                tuple(outcome_rank(s.labels) for s in members),
                subset,
                origin=members[0].origin,
                steps=pieces,
                step_labels=tuple(s.labels for s in members),
            )
        )
    return groups


def step_counts(items: Sequence) -> dict:
    """The data report's `labels.steps`: how many problems carry step labels, their solutions and steps, and how
    many steps are labelled wrong and how many softly (strictly between 0 and 1)."""
    grouped = [item for item in items if getattr(item, "steps", None) is not None]
    labels = [x for item in grouped for solution in item.step_labels for x in solution]
    return {
        "items": len(grouped),
        "of": len(items),
        "from": "stepwise {prompt, completions, labels}, Math-Shepherd, PRM800K (rm/data/steps/)",
        "solutions": sum(len(item.steps) for item in grouped),
        "steps": len(labels),
        "wrong": sum(x < CORRECT_AT for x in labels),
        "soft": sum(0.0 < x < 1.0 for x in labels),
    }
