"""Numbers finite as float32 that the loss still cannot take are bad records, named by file, line and field.

An attribute score of 1e20 passed the float32 check, but the attribute loss squares it (1e40): each epoch one
micro-batch of 16 groups was skipped as non-finite with no record named. A margin of 3e38 (a score of 1.7e38)
did the same once two pairs of a micro-batch summed their terms. The bounds (rm/data/formats/pair.py): a margin
at most 1e30, a score 5e29 (two make a margin), an attribute 1e15 (its square 1e30); the loss at those bounds is
checked in tests/model/test_attribute_loss.py."""

import json

import pytest

from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.load import load_pairs
from rm.errors import DataError

ROW = {"prompt": "Q?", "response": "a", "helpfulness": 3, "verbosity": 1}
PAIR = {"prompt": "Q?", "chosen": " yes", "rejected": " no"}
GROUP = {"prompt": "Q?", "responses": [{"text": " a", "score": 1}, {"text": " b", "score": 2}]}
UF = {
    "instruction": "Q?",
    "completions": [
        {"response": "a", "overall_score": 8.0, "annotations": {"honesty": {"Rating": "5"}}},
        {"response": "b", "overall_score": 3.0, "annotations": {"honesty": {"Rating": "1"}}},
    ],
}
UF_BAD = UF | {
    "completions": [UF["completions"][0], UF["completions"][1] | {"annotations": {"honesty": {"Rating": "1e20"}}}]
}


def rows(bad: dict) -> list[dict]:
    """A good prompt's two rows, then `bad` and its partner (lines 3 and 4)."""
    good = [ROW | {"prompt": "P?"}, ROW | {"prompt": "P?", "response": "b", "helpfulness": 1}]
    return good + [bad, ROW | {"response": "b", "helpfulness": 0}]


# (id, records, attribute, error regex after "data.jsonl:", skipped in skip mode beside the bad record)
ROW_LEFT = {"too_few_responses": 1}
"""The bad row's partner, alone in its prompt's group."""
CASES = [
    (
        "row-column",
        rows(ROW | {"verbosity": 1e20}),
        "verbosity",
        r"3: field 'verbosity' is 1e\+20, beyond ±1e\+15",
        ROW_LEFT,
    ),
    (
        "row-mapping",
        rows({k: v for k, v in ROW.items() if k != "verbosity"} | {"attributes": {"verbosity": -2e15}}),
        "verbosity",
        r"3: field 'attributes\.verbosity' is -2e\+15, beyond ±1e\+15: the attribute loss squares it",
        ROW_LEFT,
    ),
    (
        "pair",
        [PAIR | {"chosen_attributes": {"verbosity": 1}}, PAIR | {"rejected_attributes": {"verbosity": "1e16"}}],
        "verbosity",
        r"2: field 'rejected_attributes\.verbosity' is 1e\+16",
        {},
    ),
    (
        "ultrafeedback",
        [UF, UF_BAD],
        "honesty",
        r"2: field 'completions\[1\]\.annotations\.honesty\.Rating' is 1e\+20",
        {},
    ),
    (
        "responses",
        [GROUP, GROUP | {"responses": [{"text": " a", "score": 1, "attributes": {"verbosity": 1e20}}] * 2}],
        "verbosity",
        r"2: field 'responses\[0\]\.attributes\.verbosity' is 1e\+20",
        {},
    ),
    # Within float32 (the old check) but past what the pairwise loss sums: a margin, and a score.
    ("margin", [PAIR, PAIR | {"margin": 3e38}], "", r"2: field 'margin' is 3e\+38, beyond ±1e\+30", {}),
    (
        "score",
        [GROUP, GROUP | {"responses": [{"text": " a", "score": 1e30}, {"text": " b", "score": 0}]}],
        "",
        r"2: field 'responses\[0\]\.score' is 1e\+30, beyond ±5e\+29: two scores' difference is a margin",
        {},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_value_the_loss_cannot_take_is_a_bad_record_naming_file_line_and_field(tmp_path, case):
    _, records, attribute, message, more = case
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(DataError, match=r"data\.jsonl:" + message) as info:  # attributes are read whatever the head
        load_pairs(str(path), "train", [], DataConfig())
    assert "\n" not in str(info.value)
    report = DataReport("skip")
    kept = load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"), report=report)
    assert len(kept) == 1 and report.skipped_counts() == {"out_of_range": 1} | more


def test_values_within_the_bounds_load_as_written(tmp_path):
    path = tmp_path / "data.jsonl"
    records = [PAIR | {"margin": -1e30}, PAIR | {"prompt": "R?", "chosen_score": 5e29, "rejected_score": -5e29}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    first, second = load_pairs(str(path), "train", [], DataConfig())
    assert first.margin == -1e30 and not second.tie
    path.write_text(
        json.dumps(ROW | {"verbosity": -1e15}) + "\n" + json.dumps(ROW | {"response": "b", "helpfulness": 0}) + "\n"
    )
    (group,) = load_pairs(str(path), "train", [], DataConfig())
    assert sorted(a["verbosity"] for a in group.attributes) == [-1e15, 1.0]
