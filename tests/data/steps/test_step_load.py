"""Loading a stepwise file (rm/data/steps/step_load.py): the three published layouts of the same three solutions
load to equal records, every bad record stops the load with its file, line and field named or is skipped and
counted, a file holds one layout, and grouping gathers a problem's solutions in first-seen order."""

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from rm.data.data_report import DataReport
from rm.data.steps.step_load import load_step_file
from rm.data.steps.step_records import StepSolution, group_by_prompt
from rm.errors import DataError

FIXTURES = Path(__file__).parent / "fixtures"
LAYOUTS = ("stepwise.jsonl", "math_shepherd.jsonl", "prm800k.jsonl")
P1 = "Mia has 3 red pens and 4 blue pens. How many pens does she have?"
P2 = "A box holds 12 eggs and 5 of them break. How many eggs are whole?"


def fixture(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines()]


def written(tmp_path: Path, records: list, name: str = "steps.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def content(solutions: list[StepSolution]) -> list[tuple]:
    return [(s.prompt, s.steps, s.labels) for s in solutions]


def test_the_three_layouts_load_the_same_solutions():
    loaded = {name: load_step_file(FIXTURES / name) for name in LAYOUTS}
    expected = [
        (P1, ("Step 1: She has 3 + 4 pens.", "Step 2: 3 + 4 = 7.", "Step 3: The answer is: 7"), (1.0, 1.0, 1.0)),
        (P2, ("Step 1: The whole eggs are 12 - 5.", "Step 2: 12 - 5 = 8."), (1.0, 0.0)),
        (
            P1,
            (
                "Step 1: Add the red pens to the blue pens.",
                "Step 2: Red and blue make 3 + 4 = 7 pens.",
                "Step 3: So she has 3 - 4 = -1 pens. The answer is: -1",
            ),
            (1.0, 1.0, 0.0),
        ),
    ]
    for name, solutions in loaded.items():
        assert content(solutions) == expected, name
        assert [s.origin for s in solutions] == [f"{FIXTURES / name}:{n}" for n in (1, 2, 3)]
    same = [[dataclasses.replace(s, origin="") for s in solutions] for solutions in loaded.values()]
    assert same[0] == same[1] == same[2]


def test_a_json_array_and_a_gzipped_file_load_alike(tmp_path):
    records = fixture("math_shepherd.jsonl")
    array = tmp_path / "steps.json"
    array.write_text("[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n]\n")
    packed = tmp_path / "steps.jsonl.gz"
    packed.write_bytes(gzip.compress((FIXTURES / "math_shepherd.jsonl").read_bytes()))
    plain = content(load_step_file(FIXTURES / "math_shepherd.jsonl"))
    from_array, from_gzip = load_step_file(array), load_step_file(str(packed))
    assert content(from_array) == content(from_gzip) == plain
    assert [s.origin for s in from_array] == [f"{array}:{n}" for n in (2, 3, 4)]  # the line each element starts on


def test_a_soft_label_stays_soft(tmp_path):
    path = written(tmp_path, [{"prompt": "Q?", "completions": ["a", "b"], "labels": [0.7, 0]}])
    assert load_step_file(path)[0].labels == (0.7, 0.0)


GOOD = fixture("stepwise.jsonl")[0]
SHEPHERD = fixture("math_shepherd.jsonl")[0]
PRM = fixture("prm800k.jsonl")[0]
BAD = [
    ("stepwise-no-step", GOOD | {"completions": [], "labels": []}, "no_steps", "completions"),
    ("stepwise-empty-step", GOOD | {"completions": ["a", " ", "c"]}, "empty_step", "completions[1]"),
    ("stepwise-lengths", GOOD | {"labels": [True, False]}, "length_mismatch", "labels"),
    ("stepwise-label-above-1", GOOD | {"labels": [True, 1.5, True]}, "label_out_of_range", "labels[1]"),
    ("stepwise-label-below-0", GOOD | {"labels": [-0.1, True, True]}, "label_out_of_range", "labels[0]"),
    ("stepwise-label-text", GOOD | {"labels": [True, "yes", True]}, "not_a_label", "labels[1]"),
    ("stepwise-label-null", GOOD | {"labels": [True, True, None]}, "not_a_label", "labels[2]"),
    ("stepwise-missing-labels", {k: v for k, v in GOOD.items() if k != "labels"}, "missing_field", "labels"),
    ("shepherd-no-marker", SHEPHERD | {"input": "Q? Step 1: a"}, "no_steps", "input"),
    ("shepherd-empty-step", {"input": "Q? Step 1: a ки ки", "label": "Q? Step 1: a + +"}, "empty_step", "input"),
    ("shepherd-missing-label", {"input": SHEPHERD["input"], "task": "GSM8K"}, "missing_field", "label"),
    ("shepherd-mark-missing", SHEPHERD | {"label": SHEPHERD["label"][:-1]}, "marker_mismatch", "label"),
    ("shepherd-mark-extra", SHEPHERD | {"label": SHEPHERD["label"] + "+"}, "marker_mismatch", "label"),
    ("prm-no-step", PRM | {"label": PRM["label"] | {"steps": []}}, "no_steps", "label.steps"),
    ("prm-missing-question", {k: v for k, v in PRM.items() if k != "question"}, "missing_field", "question"),
    ("prm-missing-problem", PRM | {"question": {"ground_truth_answer": "7"}}, "missing_field", "question.problem"),
]


@pytest.mark.parametrize(("record", "reason", "field"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_record_stops_the_load_naming_file_line_and_field(tmp_path, record, reason, field):
    path = written(tmp_path, [_good_like(record), record])
    with pytest.raises(DataError) as info:
        load_step_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: ") and f"'{field}'" in message and "on_bad_record=skip" in message
    report = DataReport("skip")
    load_step_file(path, report)
    assert [(b.reason, b.field) for b in report.skipped] == [(reason, field)]


def _good_like(record: dict) -> dict:
    """A good record of the same layout for line 1, so the bad one is on line 2 and the file has one layout."""
    if "input" in record or isinstance(record.get("label"), str):
        return SHEPHERD
    if "labeler" in record:
        return PRM
    return GOOD


def test_an_unknown_record_names_its_fields_and_the_layouts(tmp_path):
    path = written(tmp_path, [GOOD, {"text": "Q?", "score": 1}])
    with pytest.raises(DataError) as info:
        load_step_file(path)
    assert str(info.value).startswith(f"{path}:2: ") and "(score, text)" in str(info.value)
    assert all(name in str(info.value) for name in ("stepwise", "Math-Shepherd", "PRM800K"))
    report = DataReport("skip")
    load_step_file(path, report)
    assert report.skipped_counts() == {"unknown_format": 1}


def test_a_file_holds_one_layout(tmp_path):
    path = written(tmp_path, [GOOD, SHEPHERD, GOOD])
    with pytest.raises(DataError) as info:
        load_step_file(path)
    assert str(info.value).startswith(f"{path}:2: ") and f"{path}:1" in str(info.value)
    assert "one file holds one layout" in str(info.value)
    report = DataReport("skip")
    assert len(load_step_file(path, report)) == 2
    assert report.skipped_counts() == {"mixed_formats": 1}


def test_skip_mode_counts_every_bad_record_and_keeps_the_good(tmp_path):
    layouts = {"stepwise": GOOD, "shepherd": SHEPHERD, "prm": PRM}
    for layout, good in layouts.items():
        bad = [b for b in BAD if b[0].startswith(layout)]
        lines = [good] + [b[1] for b in bad] + ["{not json", good]
        path = tmp_path / f"{layout}.jsonl"
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in lines))
        report = DataReport("skip")
        solutions = load_step_file(path, report)
        assert [s.origin for s in solutions] == [f"{path}:1", f"{path}:{len(lines)}"]
        assert len(report.skipped) == len(bad) + 1
        reasons = sorted([b[2] for b in bad] + ["malformed_json"])
        assert sorted(s.reason for s in report.skipped) == reasons
        assert sorted(s.origin for s in report.skipped) == sorted(f"{path}:{n}" for n in range(2, len(lines)))
        fields = {s.origin: s.field for s in report.skipped if s.reason != "malformed_json"}
        assert [fields[f"{path}:{n}"] for n in range(2, len(lines) - 1)] == [b[3] for b in bad]


def test_a_malformed_line_stops_the_load_at_its_line(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n" + json.dumps(GOOD | {"labels": [2, 2, 2]}) + "\n")
    with pytest.raises(DataError, match=r"steps.jsonl:2: malformed JSON"):
        load_step_file(path)
    path.write_text(json.dumps(GOOD) + "\n{not json\n")  # the last line, with no record after it
    with pytest.raises(DataError, match=r"steps.jsonl:2: malformed JSON"):
        load_step_file(path)


def test_a_file_with_no_usable_solution_is_refused(tmp_path):
    with pytest.raises(DataError, match="no usable stepwise solutions"):
        load_step_file(written(tmp_path, []))
    with pytest.raises(DataError, match=r"label_out_of_range': 1"):
        load_step_file(written(tmp_path, [GOOD | {"labels": [2, 2, 2]}]), DataReport("skip"))


def test_grouping_gathers_a_problems_solutions_in_first_seen_order():
    solutions = load_step_file(FIXTURES / "prm800k.jsonl")  # problems P1, P2, P1
    groups = group_by_prompt(solutions)
    assert [prompt for prompt, _ in groups] == [P1, P2]
    assert [[s.origin[-1] for s in group] for _, group in groups] == [["1", "3"], ["2"]]
    assert group_by_prompt([]) == []
