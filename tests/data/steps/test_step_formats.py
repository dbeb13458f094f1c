"""Reading one stepwise record (rm/data/steps/step_formats.py): each layout is told by its own fields, and each
layout's own rules hold (Math-Shepherd's problem split and marks read by position, PRM800K's chosen path and
ratings, soft labels kept). Records are the fixtures' (invented text in each dataset's published field names) or
small edits of them."""

import copy
import json
from pathlib import Path

import pytest

from rm.data.steps.step_formats import detect_step_format, parse_step_record
from rm.errors import RecordError

FIXTURES = Path(__file__).parent / "fixtures"


def records(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines()]


STEPWISE, SHEPHERD, PRM = records("stepwise.jsonl"), records("math_shepherd.jsonl"), records("prm800k.jsonl")


def parsed(record: dict):
    return parse_step_record(record, "f.jsonl:1")


def refused(record) -> RecordError:
    with pytest.raises(RecordError) as info:
        parse_step_record(record, "f.jsonl:1")
    return info.value


@pytest.mark.parametrize(
    ("record", "layout"),
    [
        (STEPWISE[0], "stepwise"),
        (SHEPHERD[0], "math-shepherd"),
        (PRM[0], "prm800k"),
        ({"prompt": "Q?", "labels": [True]}, "stepwise"),  # a stepwise record without its steps
        ({"input": "Q? Step 1: a ки"}, "math-shepherd"),  # without its label
        ({"label": "Q? Step 1: a +"}, "math-shepherd"),  # a string label
        ({"label": {"steps": []}}, "prm800k"),  # an object label
        ({"question": {"problem": "Q?"}, "labeler": "x"}, "prm800k"),
        ({"prompt": "Q?", "input": "Q? ки"}, None),  # one field of two layouts each: a tie
        ({"text": "Q?", "score": 1}, None),
        ([1, 2], None),
    ],
)
def test_a_record_is_read_as_the_layout_whose_fields_it_has(record, layout):
    assert detect_step_format(record) == layout


def test_stepwise_labels_become_floats_and_a_soft_label_is_kept():
    record = {"prompt": "Q?", "completions": ["a", "b", "c", "d"], "labels": [True, False, 0.7, 1]}
    solution = parsed(record)
    assert solution.labels == (1.0, 0.0, 0.7, 1.0)
    assert all(type(v) is float for v in solution.labels)
    assert solution.steps == ("a", "b", "c", "d") and solution.prompt == "Q?" and solution.origin == "f.jsonl:1"


def test_math_shepherd_marks_are_read_at_the_markers_not_counted():
    """The steps' own "12 - 5" and "3 + 4" hold the mark characters: only the ones in the markers' places count."""
    second = parsed(SHEPHERD[1])
    assert second.prompt == "A box holds 12 eggs and 5 of them break. How many eggs are whole?"
    assert second.steps == ("Step 1: The whole eggs are 12 - 5.", "Step 2: 12 - 5 = 8.")
    assert second.labels == (1.0, 0.0)
    assert parsed(SHEPHERD[2]).labels == (1.0, 1.0, 0.0)


@pytest.mark.parametrize(
    ("text", "prompt", "first"),
    [
        ("Do step 1: as told. Q? Step 1: a", "Do step 1: as told. Q?", "Step 1: a"),  # the last "Step 1:"
        ("Q? step 1: a", "Q?", "step 1: a"),  # any case
        ("How many? Why? So 3.", "How many? Why?", "So 3."),  # no "Step 1:": after the last "?"
    ],
)
def test_math_shepherds_problem_ends_where_the_first_step_starts(text, prompt, first):
    record = {"input": f"{text} ки\nStep 2: b ки", "label": f"{text} +\nStep 2: b -", "task": "MATH"}
    solution = parsed(record)
    assert (solution.prompt, solution.steps, solution.labels) == (prompt, (first, "Step 2: b"), (1.0, 0.0))


@pytest.mark.parametrize(
    ("text", "label", "reason", "field"),
    [
        ("Q. Let x = 1. ки Step 1: a ки", "Q. Let x = 1. + Step 1: a +", "marker_in_prompt", "input"),
        ("Add 3 and 4. So 7 ки", "Add 3 and 4. So 7 +", "no_prompt_split", "input"),
        ("Q? Step 1: a ки Step 2: b", "Q? Step 1: a + Step 2: b", "unlabelled_step", "input"),
        ("Q? Step 1: a ки\nStep 2: b ки", "Q? Step 1: a +\nStep 2: b x", "marker_mismatch", "label"),  # x: no mark
    ],
)
def test_math_shepherd_records_that_cannot_be_split_are_refused(text, label, reason, field):
    error = refused({"input": text, "label": label, "task": "MATH"})
    assert (error.reason, error.field) == (reason, field)
    assert f"'{field}'" in error.message


def test_prm800k_follows_the_chosen_path_and_reads_neutral_as_good():
    first, second, third = (parsed(r) for r in PRM)
    assert first.labels == (1.0, 1.0, 1.0)
    # rating 0 is good; the step where the labeler stopped (chosen_completion null) ends with its first completion
    assert second.labels == (1.0, 0.0) and second.steps[-1] == "Step 2: 12 - 5 = 8."
    # the chosen alternative (index 1), then the labeler's own step (rated +1), then a wrong step
    assert third.steps[:2] == (
        "Step 1: Add the red pens to the blue pens.",
        "Step 2: Red and blue make 3 + 4 = 7 pens.",
    )
    assert third.labels == (1.0, 1.0, 0.0)


def steps_of(record: dict) -> list:
    return record["label"]["steps"]


def test_prm800k_a_stopping_step_ends_the_solution_and_later_steps_are_not_read():
    record = copy.deepcopy(PRM[0])
    steps_of(record)[1]["chosen_completion"] = None  # no human completion either: the labeler stopped here
    solution = parsed(record)
    assert len(solution.steps) == 2 and solution.labels == (1.0, 1.0)


def test_prm800k_an_unrated_last_step_ends_the_solution_before_it():
    record = copy.deepcopy(PRM[0])
    steps_of(record)[-1]["completions"][0]["rating"] = None
    solution = parsed(record)
    assert solution.steps == tuple(s["completions"][0]["text"] for s in steps_of(PRM[0])[:2])


def test_prm800k_an_unrated_step_that_the_solution_goes_on_from_is_refused():
    record = copy.deepcopy(PRM[0])
    steps_of(record)[1]["completions"][0]["rating"] = None
    error = refused(record)
    assert error.reason == "missing_rating"
    assert error.field == "label.steps[1].completions[0].rating" and error.field in error.message


def test_prm800k_human_completion_may_be_its_text():
    record = copy.deepcopy(PRM[2])
    human = steps_of(record)[1]["human_completion"]
    steps_of(record)[1]["human_completion"] = human["text"]
    assert parsed(record) == parsed(PRM[2])


@pytest.mark.parametrize(
    ("edit", "reason", "field"),
    [
        (lambda s: s[0]["completions"][0].update(rating=2), "bad_rating", "label.steps[0].completions[0].rating"),
        (lambda s: s[0]["completions"][0].update(rating=True), "bad_rating", "label.steps[0].completions[0].rating"),
        (lambda s: s[0].update(chosen_completion=3), "bad_index", "label.steps[0].chosen_completion"),
        (lambda s: s[1]["completions"][0].update(text=" "), "empty_step", "label.steps[1].completions[0].text"),
        (lambda s: s[0]["completions"][0].pop("text"), "not_a_string", "label.steps[0].completions[0].text"),
        (lambda s: s[0]["completions"][0].update(rating=None), "no_steps", "label.steps"),  # unrated and last
    ],
)
def test_prm800k_bad_steps_name_their_field(edit, reason, field):
    record = copy.deepcopy(PRM[0])
    if reason == "no_steps":
        del steps_of(record)[1:]
    edit(steps_of(record))
    error = refused(record)
    assert (error.reason, error.field) == (reason, field)
    assert f"'{field}'" in error.message


def test_an_unknown_record_lists_its_fields_and_the_three_layouts():
    error = refused({"text": "Q?", "score": 1})
    assert error.reason == "unknown_format"
    assert "(score, text)" in error.message
    for layout in ("stepwise", "Math-Shepherd", "PRM800K"):
        assert layout in error.message


def test_every_published_layout_is_told_from_preference_records():
    """`data.format: auto` sends a file to the stepwise reader on its first record: each layout's fixture is
    stepwise, and the preference formats that share a field name (HelpSteer2's prompt, UltraFeedback's
    completions) are not."""
    from pathlib import Path

    from rm.data.steps.step_formats import is_step_record

    fixtures = Path(__file__).parent / "fixtures"
    for name in ("stepwise.jsonl", "math_shepherd.jsonl", "prm800k.jsonl"):
        records = [json.loads(line) for line in (fixtures / name).read_text(encoding="utf-8").splitlines()]
        assert records and all(is_step_record(r) for r in records), name
    assert not is_step_record({"prompt": "Q?", "response": "A.", "helpfulness": 3})
    assert not is_step_record({"instruction": "Q?", "completions": [{"response": "A."}]})
    assert not is_step_record({"prompt": "Q?", "chosen": "a", "rejected": "b"})
