"""What asks for step scores, in each shape rm reads one, and the scores shaped back like it.

- `{"prompt": str, "solutions": [[step, ...], ...]}`: a problem and its solutions -> `[[p, ...], ...]`, per
  solution, per step;
- `{"prompt": str, "completions": [step, ...]}` (TRL's stepwise layout; its `labels`, if any, are not read) ->
  `[p, ...]`;
- with `published` (`rm score`'s records, `rm.load(...).score_steps`): a Math-Shepherd or PRM800K record, read by
  training's own parsers (rm/data/steps/step_formats.py) -> `[p, ...]` for the one solution it holds.

p is P(the step is correct) (rm/evaluation/steps/step_scoring.py), None for a step that did not fit max_length.
`rm.load(...).score_steps`, `rm score` and `rm serve`'s /score_steps read their inputs here, so one input is one
problem to all of them. A step must hold text (as training's loaders require): an empty one is a bad input, as is
an empty problem or a solution with no step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rm.data.steps.step_formats import MARKER, MATH_SHEPHERD, PRM800K, detect_step_format, parse_step_record
from rm.errors import RecordError
from rm.evaluation.steps.step_scoring import StepProblem, StepScores

STEP_FIELD = "step_scores"
"""The field `rm score` adds to a stepwise record, and the key of /score_steps' reply."""
SHAPES_HINT = '{"prompt": str, "solutions": [[step, ...], ...]} or {"prompt": str, "completions": [step, ...]}'


@dataclass(frozen=True)
class StepInput:
    """One input's problem, and whether it gave one solution alone (its scores come back as one list)."""

    problem: StepProblem
    single: bool

    def shaped(self, scores: StepScores) -> list[float | None] | StepScores:
        """The problem's scores in the input's shape: one list for one solution, else a list per solution."""
        return scores[0] if self.single else scores

    @property
    def solutions(self) -> int:
        return len(self.problem.solutions)


def asks_for_steps(record: Any, published: bool = False) -> bool:
    """Whether `record` asks for step scores: `solutions`, or a `prompt` with a list of `completions` that are not
    objects (an UltraFeedback-like record's completions are {response, ...} objects: rewards, not steps); with
    `published`, a Math-Shepherd or PRM800K record too."""
    if not isinstance(record, dict):
        return False
    if "solutions" in record:
        return True
    completions = record.get("completions")
    if "prompt" in record and isinstance(completions, list) and not any(isinstance(c, dict) for c in completions):
        return True
    return published and is_published(record)


def is_published(record: dict) -> bool:
    """A Math-Shepherd record (its `input` holding the step marker) or a PRM800K one (`question` and `label`
    objects), read by training's parsers."""
    fmt = detect_step_format(record)
    if fmt == MATH_SHEPHERD:
        return isinstance(record.get("input"), str) and MARKER in record["input"]
    return fmt == PRM800K and isinstance(record.get("question"), dict) and isinstance(record.get("label"), dict)


def step_input(record: Any, published: bool = False) -> StepInput:
    """The problem `record` asks step scores for, or the RecordError naming the field at fault (`solutions[1][2]`);
    the caller adds where the record is (`input[3]`, "file:line")."""
    if not isinstance(record, dict):
        raise RecordError("not_an_object", f"expected an object {SHAPES_HINT}, got {type(record).__name__}")
    if published and "solutions" not in record and "completions" not in record and is_published(record):
        solution = parse_step_record(record, "")
        return StepInput(StepProblem(solution.prompt, (solution.steps,)), single=True)
    prompt = record.get("prompt")
    if not isinstance(prompt, str):
        got = "missing" if prompt is None else f"a {type(prompt).__name__}"
        raise RecordError("not_a_string", f"field 'prompt' must be a string (the problem), got {got}", "prompt")
    if not prompt.strip():
        raise RecordError("empty_prompt", "field 'prompt' is empty: a solution needs its problem", "prompt")
    if ("solutions" in record) == ("completions" in record):
        raise RecordError("no_steps", f"give either 'solutions' or 'completions', not both or neither: {SHAPES_HINT}")
    if "completions" in record:
        return StepInput(StepProblem(prompt, (steps_of(record["completions"], "completions"),)), single=True)
    solutions = record["solutions"]
    if not isinstance(solutions, list):
        message = f"field 'solutions' must be a list of solutions (each a list of steps), got {kind(solutions)}"
        raise RecordError("not_a_list", message, "solutions")
    found = tuple(steps_of(s, f"solutions[{i}]") for i, s in enumerate(solutions))
    return StepInput(StepProblem(prompt, found), single=False)


def steps_of(value: Any, field: str) -> tuple[str, ...]:
    """A solution's steps: a non-empty list of strings, none of them blank."""
    if not isinstance(value, list):
        raise RecordError("not_a_list", f"field {field!r} must be a list of steps (strings), got {kind(value)}", field)
    if not value:
        raise RecordError("no_steps", f"field {field!r} is empty: a solution needs at least one step", field)
    for i, step in enumerate(value):
        if not isinstance(step, str):
            where = f"{field}[{i}]"
            raise RecordError("not_a_string", f"field {where!r} must be a string (a step), got {kind(step)}", where)
        if not step.strip():
            raise RecordError("empty_step", f"field '{field}[{i}]' is an empty step", f"{field}[{i}]")
    return tuple(value)


def kind(value: Any) -> str:
    """A value's type in JSON's words ("an object", "a number"), for messages about a request or a record."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else f"a {type(value).__name__}")
