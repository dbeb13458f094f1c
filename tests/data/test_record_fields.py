"""A bad record is named in the terms of its own format: a record that misses a field is read as the format whose
fields it has (not one whose field it then lacks), a prompt rendered as a user turn may not be empty, and an
attribute key that misspells a configured name is named instead of silently counted missing. Records are built
from the fixtures, in each dataset's published field names."""

import json
import math
from types import SimpleNamespace

import pytest

from conftest import REPO
from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.load import load_pairs
from rm.errors import DataError

FIXTURES = REPO / "tests" / "fixtures"
CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}]


def first(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text().splitlines()[0])


def without(record: dict, *names: str) -> dict:
    return {k: v for k, v in record.items() if k not in names}


def refused(tmp_path, records: list, attributes: tuple = (), **data) -> str:
    """The one-line error of loading `records` (line 1 first), after checking it is a single line."""
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    head = SimpleNamespace(attributes=list(attributes), attribute_scales={}) if attributes else None
    with pytest.raises(DataError) as info:
        load_pairs(str(path), "train", [], DataConfig(**data), head=head)
    assert "\n" not in str(info.value)
    return str(info.value).split("data.jsonl:", 1)[1]


ROWS, RB2, UF = first("helpsteer2_rows.jsonl"), first("rewardbench2.jsonl"), first("ultrafeedback.jsonl")
PREFERENCE = {"prompt": "Q?", "response_1": "a", "response_2": "b", "preference_strength": 2}
CLOSEST = [
    ("helpsteer2-row-without-response", without(ROWS, "response"), "field 'response' is missing"),
    ("rewardbench2-chosen-a-string", RB2 | {"chosen": RB2["chosen"][0]}, "field 'chosen' must be a list, got str"),
    ("rewardbench2-without-rejected", without(RB2, "rejected"), "field 'rejected' is missing"),
    ("ultrafeedback-without-completions", without(UF, "completions"), "field 'completions' is missing"),
    (
        "preference-without-strength",
        without(PREFERENCE, "preference_strength"),
        "field 'preference_strength' is missing",
    ),
    ("conversation-chosen-a-string", {"chosen": "x", "rejected": CHAT}, "field 'chosen' must be a list of messages"),
]


@pytest.mark.parametrize("case", CLOSEST, ids=[c[0] for c in CLOSEST])
def test_a_record_missing_a_field_is_named_in_its_own_formats_fields(tmp_path, case):
    _, record, message = case
    assert refused(tmp_path, [record]).startswith(f"1: {message}")


GOOD = {"prompt": "P?", "chosen": " yes", "rejected": " no"}
EMPTY = [
    ("ultrafeedback", UF | {"instruction": ""}, "instruction"),
    ("ultrafeedback-prompt", without(UF, "instruction") | {"prompt": " \n"}, "prompt"),
    ("rewardbench2", RB2 | {"prompt": " "}, "prompt"),
    ("helpsteer2-row", ROWS | {"prompt": ""}, "prompt"),
    ("responses", {"prompt": "", "responses": [{"text": "a", "score": 1}, {"text": "b", "score": 0}]}, "prompt"),
    ("preference", PREFERENCE | {"prompt": ""}, "prompt"),
    ("conversation", {"prompt": "", "chosen": [CHAT[1]], "rejected": [CHAT[1] | {"content": "b"}]}, "prompt"),
]


@pytest.mark.parametrize("case", EMPTY, ids=[c[0] for c in EMPTY])
def test_an_empty_prompt_rendered_as_a_user_turn_is_a_bad_record(tmp_path, case):
    _, record, name = case
    message = refused(tmp_path, [GOOD, record])
    assert message.startswith(f"2: field '{name}' is empty: it would train as an empty user turn")
    report = DataReport("skip")
    path = tmp_path / "data.jsonl"
    kept = load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"), report=report)
    assert len(kept) == 1 and report.skipped_counts() == {"empty_prompt": 1}


def test_the_prompt_format_still_takes_an_empty_prompt(tmp_path):
    """`prompt` trains `prompt + response` as written (no user turn is rendered), so "" is a response alone."""
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"prompt": "", "chosen": "yes", "rejected": "no"}) + "\n")
    (pair,) = load_pairs(str(path), "train", [], DataConfig())
    assert (pair.prompt, pair.chosen) == ("", "yes")


PAIR = {"prompt": "Q?", "chosen": " yes", "rejected": " no", "chosen_attributes": {"helpfulness": 3}}
ANNOTATED = UF["completions"][1] | {"annotations": {"Helpfulness": {"Rating": "2"}}}
MISSPELT = [
    ("pair-mapping", PAIR | {"rejected_attributes": {"helpfullness": 1}}, "rejected_attributes.helpfullness"),
    ("pair-case", PAIR | {"chosen_attributes": {"Helpfulness": 3}}, "chosen_attributes.Helpfulness"),
    ("row-mapping", without(ROWS, "helpfulness") | {"attributes": {"helpfulnes": 2}}, "attributes.helpfulnes"),
    ("row-column", without(ROWS, "helpfulness") | {"Helpfulness": 2}, "Helpfulness"),
    (
        "responses",
        {"prompt": "Q?", "responses": [{"text": "a", "score": 1, "attributes": {"helpful-ness": 2}}] * 2},
        "responses[0].attributes.helpful-ness",
    ),
    (
        "ultrafeedback-annotation",
        UF | {"completions": [UF["completions"][0], ANNOTATED]},
        "completions[1].annotations.Helpfulness",
    ),
]


@pytest.mark.parametrize("case", MISSPELT, ids=[c[0] for c in MISSPELT])
def test_a_misspelt_attribute_key_is_named_with_the_configured_name(tmp_path, case):
    _, record, field = case
    score = "correctness" if case[0].startswith("row") else ""  # a row's own score is not the misspelt one
    message = refused(tmp_path, [record], ("helpfulness",), score_field=score)
    assert message.startswith(f"1: field {field!r} is not in model.head.attributes; did you mean 'helpfulness'")


def test_a_misspelt_configured_name_names_the_records_spelling(tmp_path):
    """Every HelpSteer2 row has `helpfulness`: the config's `helpfulnes` is the typo, and the message says both."""
    message = refused(tmp_path, [ROWS], ("helpfulnes",))
    assert "field 'helpfulness' is not in model.head.attributes; did you mean 'helpfulnes'" in message
    assert "the record's key or the config's name" in message


def test_other_keys_and_the_right_name_beside_a_near_one_are_left_alone(tmp_path):
    path = tmp_path / "data.jsonl"
    records = [
        PAIR | {"rejected_attributes": {"tone": 1, "honesty": 2}},  # unconfigured, not near: missing, as before
        PAIR | {"prompt": "R?", "rejected_attributes": {"helpfulness": 1, "Helpfulness": 9}},  # the name is there
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    head = SimpleNamespace(attributes=["helpfulness"], attribute_scales={})
    first_pair, second_pair = load_pairs(str(path), "train", [], DataConfig(), head=head)
    assert math.isnan(first_pair.attributes[1][0])  # missing, as before
    assert second_pair.attributes == ((3.0,), (1.0,))


def test_skip_mode_counts_a_misspelt_key_and_keeps_the_rest(tmp_path):
    path = tmp_path / "data.jsonl"
    records = [PAIR, PAIR | {"prompt": "R?", "chosen_attributes": {"helpfulnss": 3}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = DataReport("skip")
    head = SimpleNamespace(attributes=["helpfulness"], attribute_scales={})
    kept = load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"), report=report, head=head)
    assert len(kept) == 1 and report.skipped_counts() == {"misspelt_attribute": 1}
    assert report.skipped[0].field == "chosen_attributes.helpfulnss"
