"""Stepwise records in three published layouts, each told by its own fields and read into one `StepSolution`.

- `stepwise` (TRL's stepwise supervision): `prompt`, `completions: [step, …]`, `labels: [bool or 0..1, …]`.
- `math-shepherd`: `input` (the problem, then steps each ending in "ки"), `label` (the same text with each "ки"
  as "+" or "-"), `task`.
- `prm800k` (OpenAI's raw labels): `question: {problem, ground_truth_answer, …}`, `label: {steps: [{completions:
  [{text, rating, flagged}], human_completion, chosen_completion}], finish_reason}`, `labeler`, `timestamp`, …

A record is read as the layout most of whose fields it has (a string `label` counts for Math-Shepherd, an object
for PRM800K), so one that misses a field is refused in its own layout's terms ("field 'labels' is missing"), not
as some other layout; a tie, or none of the fields, is `unknown_format`. Labels become floats in [0, 1]:

- stepwise: True/False -> 1.0/0.0, a number in [0, 1] kept as a soft target (so 0/1 work too).
- Math-Shepherd: the problem is the text before the last "Step 1:" (any case) ahead of the first marker, which
  starts the first step, as TRL's conversion (examples/datasets/math_shepherd.py) splits it; with no "Step 1:"
  there, the problem ends at the last "?" before the first marker; with "Step 1:" only after it, a marker sits
  inside the problem (an annotation slip of a few records) and the record is refused, as it is with neither.
  `label` has one character where `input` has the two of "ки", so the k-th marker (from 0) at `input[i]` is read
  at `label[i - k]`: "+" -> 1.0, "-" -> 0.0. Marks are found by position, not by counting "+" and "-", which the
  steps' own arithmetic holds. Steps are stripped; text after the last marker would be a step with no label.
- PRM800K: one solution per record, following each step's `chosen_completion`; where that is null,
  `human_completion` (a labeler's own step, +1 by the instructions; an object with `text`, or the text) if there
  is one, else the labeler stopped at this step: it ends the solution with its first completion (in phase 2 the
  pre-generated step, whose -1 is the error that stopped the labeling) and later steps are not read, as TRL's
  conversion stops there too. Ratings 1 and 0 -> 1.0, -1 -> 0.0: a 0 (neutral) marks a step that is not wrong
  but makes no progress (the dataset's README); TRL's conversion (examples/datasets/prm800k.py) is stricter and
  reads only 1 as good. A null rating is a bad record,
  except at the step that ends the solution: the labeler stopped before rating it, so the solution ends before
  it. `finish_reason`, `flagged` and the alternative completions are not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rm.data.formats.pair import string_of, text_field
from rm.data.formats.ranked import list_field
from rm.data.steps.step_records import StepSolution
from rm.errors import RecordError

STEPWISE, MATH_SHEPHERD, PRM800K = "stepwise", "math-shepherd", "prm800k"
LAYOUT_FIELDS = {
    STEPWISE: ("prompt", "completions", "labels"),
    MATH_SHEPHERD: ("input", "label", "task"),
    PRM800K: ("question", "label", "labeler", "timestamp", "generation", "is_quality_control_question")
    + ("is_initial_screening_question",),
}
"""Each layout's published top-level fields (`label`: a string in Math-Shepherd, an object in PRM800K)."""
LAYOUTS_HINT = (
    "stepwise {prompt, completions, labels}, Math-Shepherd {input, label (text), task} "
    "or PRM800K {question, label (object with steps), labeler, timestamp, ...}"
)
MARKER = "ки"
"""Math-Shepherd's end of a step in `input`."""
MARKS = {"+": 1.0, "-": 0.0}
RATINGS = {1: 1.0, 0: 1.0, -1: 0.0}
"""PRM800K's rating -> label: a neutral step (0) is not wrong."""
STEP_ONE = re.compile(r"step 1:", re.IGNORECASE)


def detect_step_format(record: Any) -> str | None:
    """The layout whose fields the record has most of; None for none of them, a tie, or a record not an object."""
    if not isinstance(record, dict):
        return None
    label = record.get("label")
    found = {
        fmt: sum(name in record for name in names if name != "label")
        + (fmt == MATH_SHEPHERD and isinstance(label, str))
        + (fmt == PRM800K and isinstance(label, dict))
        for fmt, names in LAYOUT_FIELDS.items()
    }
    best = max(found.values())
    top = [fmt for fmt, n in found.items() if n == best]
    return top[0] if best and len(top) == 1 else None


def is_step_record(record: Any) -> bool:
    """Whether a record is plainly stepwise, for a loader that reads preference data too (`data.format: auto`):
    the stepwise layout's three fields with a list of steps, Math-Shepherd's `input` and text `label` holding its
    step marker, or PRM800K's `question` and `label` object. A record only like one is left to the preference
    formats (a HelpSteer2 row has `prompt` but no `completions`; an UltraFeedback record has `completions` but no
    `prompt` and `labels`)."""
    if not isinstance(record, dict):
        return False
    label = record.get("label")
    stepwise = all(name in record for name in LAYOUT_FIELDS[STEPWISE]) and isinstance(record["completions"], list)
    shepherd = isinstance(record.get("input"), str) and MARKER in record["input"] and isinstance(label, str)
    return stepwise or shepherd or ("question" in record and isinstance(label, dict))


def parse_step_record(record: Any, origin: str, fmt: str | None = None) -> StepSolution:
    """The solution one record holds, read in layout `fmt` (detected from its fields when None), or the
    RecordError naming the field at fault; the message leaves the origin ("file:line") to the loader."""
    if not isinstance(record, dict):
        raise RecordError("not_an_object", f"expected a JSON object, got {type(record).__name__}")
    fmt = fmt or detect_step_format(record)
    if fmt is None:
        fields = ", ".join(sorted(map(str, record))) or "none"
        message = f"cannot tell the stepwise layout from the record's fields ({fields}); expected {LAYOUTS_HINT}"
        raise RecordError("unknown_format", message)
    prompt, steps, labels = PARSERS[fmt](record)
    return StepSolution(prompt, tuple(steps), tuple(labels), origin)


def step_label(value: Any, field: str) -> float:
    """A step's label: True/False, or a number in [0, 1] (a soft target), as a float."""
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        kind = "null" if value is None else type(value).__name__
        message = f"field {field!r} must be true, false or a number in [0, 1], got {kind}"
        raise RecordError("not_a_label", message, field)
    if not 0.0 <= value <= 1.0:  # NaN fails this too
        raise RecordError("label_out_of_range", f"field {field!r} is {value!r}, outside [0, 1]", field)
    return float(value)


def _step(value: Any, field: str) -> str:
    text = string_of(value, field)
    if not text.strip():
        raise RecordError("empty_step", f"field {field!r} is an empty step", field)
    return text


def _prompt(text: str, field: str) -> str:
    if not text.strip():
        raise RecordError("empty_prompt", f"field {field!r} is empty: a solution needs its problem", field)
    return text


def _object(value: Any, field: str) -> dict:
    if value is None:
        raise RecordError("missing_field", f"field {field!r} is missing", field)
    if not isinstance(value, dict):
        raise RecordError("not_an_object", f"field {field!r} must be an object, got {type(value).__name__}", field)
    return value


def _no_steps(field: str, why: str = "is empty") -> RecordError:
    return RecordError("no_steps", f"field {field!r} {why}: a solution needs at least one step", field)


def parse_stepwise(record: dict) -> tuple[str, list[str], list[float]]:
    prompt = _prompt(text_field(record, "prompt"), "prompt")
    steps, labels = list_field(record, "completions", "completions"), list_field(record, "labels", "labels")
    if not steps:
        raise _no_steps("completions")
    if len(steps) != len(labels):
        message = f"fields 'completions' and 'labels' differ in length: {len(steps)} steps, {len(labels)} labels"
        raise RecordError("length_mismatch", message, "labels")
    texts = [_step(s, f"completions[{i}]") for i, s in enumerate(steps)]
    return prompt, texts, [step_label(v, f"labels[{i}]") for i, v in enumerate(labels)]


def parse_math_shepherd(record: dict) -> tuple[str, list[str], list[float]]:
    text, label = text_field(record, "input"), text_field(record, "label")
    at = [m.start() for m in re.finditer(MARKER, text)]
    if not at:
        raise _no_steps("input", f"holds no step marker {MARKER!r}")
    marks = len(label) - (len(text) - len(MARKER) * len(at))  # the label's length less the text around the marks
    if marks != len(at):
        message = (
            f"fields 'input' and 'label' disagree: 'input' has {len(at)} step markers {MARKER!r} but 'label' has "
            f"room for {marks} marks ('+' or '-'), by its length"
        )
        raise RecordError("marker_mismatch", message, "label")
    labels = []
    for k, i in enumerate(at):
        mark = label[i - k]
        if mark not in MARKS:
            message = f"field 'label' has {mark!r} at character {i - k}, where 'input' has marker {k + 1}: not + or -"
            raise RecordError("marker_mismatch", message, "label")
        labels.append(MARKS[mark])
    parts = text.split(MARKER)
    if parts[-1].strip():
        message = f"field 'input' has text after its last step marker {MARKER!r}: a step with no label"
        raise RecordError("unlabelled_step", message, "input")
    prompt, first = _problem(parts[0], text)
    steps = [s.strip() for s in (first, *parts[1:-1])]
    for k, step in enumerate(steps):
        if not step:
            raise RecordError("empty_step", f"field 'input' has an empty step {k + 1} (before marker {k + 1})", "input")
    return prompt, steps, labels


def _problem(head: str, text: str) -> tuple[str, str]:
    """(problem, first step) from the text before the first marker (the rule in the module docstring)."""
    starts = list(STEP_ONE.finditer(head))
    if starts:
        cut = starts[-1].start()
    elif STEP_ONE.search(text):
        message = f"field 'input' has a step marker {MARKER!r} before 'Step 1:': a marker inside the problem"
        raise RecordError("marker_in_prompt", message, "input")
    elif "?" in head:
        cut = head.rindex("?") + 1
    else:
        message = f"field 'input': no 'Step 1:' and no '?' before the first marker {MARKER!r} to end the problem at"
        raise RecordError("no_prompt_split", message, "input")
    return _prompt(head[:cut].strip(), "input"), head[cut:]


def _rating(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in RATINGS:
        message = f"field {field!r} must be a rating -1, 0 or 1, got {value!r}"
        raise RecordError("bad_rating", message, field)
    return RATINGS[int(value)]


def _chosen(step: dict, index: Any, where: str) -> tuple[dict, str]:
    """The completion `index` picks and its field name."""
    completions = list_field(step, "completions", f"{where}.completions")
    ok = isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(completions)
    if not ok:
        message = f"field '{where}.chosen_completion' is {index!r}, not an index of its {len(completions)} completions"
        raise RecordError("bad_index", message, f"{where}.chosen_completion")
    name = f"{where}.completions[{index}]"
    return _object(completions[index], name), name


def _human(value: Any, where: str) -> str:
    name = f"{where}.human_completion"
    if isinstance(value, dict):
        return _step(value.get("text"), f"{name}.text")
    return _step(value, name)


def parse_prm800k(record: dict) -> tuple[str, list[str], list[float]]:
    question = _object(record.get("question"), "question")
    if question.get("problem") is None:
        raise RecordError("missing_field", "field 'question.problem' is missing", "question.problem")
    prompt = _prompt(string_of(question["problem"], "question.problem"), "question.problem")
    steps = list_field(_object(record.get("label"), "label"), "steps", "label.steps")
    texts: list[str] = []
    labels: list[float] = []
    for i, raw in enumerate(steps):
        where = f"label.steps[{i}]"
        step = _object(raw, where)
        index, human = step.get("chosen_completion"), step.get("human_completion")
        if index is None and human is not None:
            texts.append(_human(human, where))
            labels.append(1.0)  # the instructions' "+1 step" of the labeler's own
            continue
        ends = i == len(steps) - 1 or index is None  # the labeler stopped here (docstring)
        if index is None:
            if not step.get("completions"):
                break
            index = 0
        completion, name = _chosen(step, index, where)
        rating = completion.get("rating")
        if rating is None and ends:
            break  # stopped before rating it
        if rating is None:
            message = f"field '{name}.rating' is null in a step that the solution goes on from"
            raise RecordError("missing_rating", message, f"{name}.rating")
        texts.append(_step(completion.get("text"), f"{name}.text"))
        labels.append(_rating(rating, f"{name}.rating"))
        if ends:
            break
    if not texts:
        raise _no_steps("label.steps", "has no rated step")
    return prompt, texts, labels


PARSERS: dict[str, Callable[[dict], tuple[str, list[str], list[float]]]] = {
    STEPWISE: parse_stepwise,
    MATH_SHEPHERD: parse_math_shepherd,
    PRM800K: parse_prm800k,
}
"""Each layout's reader, record -> (prompt, steps, labels)."""
