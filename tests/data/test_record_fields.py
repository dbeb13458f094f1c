"""A bad record is named in the terms of its own format: a record that misses a field is read as the format whose
fields it has (not one whose field it then lacks), a prompt rendered as a user turn may not be empty, and an
attribute key that misspells a configured name is named instead of silently counted missing. Records are built
from the fixtures, in each dataset's published field names."""

import json
import math

import pytest

from conftest import REPO, after_cache, every
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


def refused(tmp_path, records: list, attributes: tuple = (), tokenizer=None, **data) -> str:
    """The one-line error of loading `records` (line 1 first), after checking it is a single line; with
    `attributes`, of a run whose head names them, after the cache (rm/collate/loss_labels.py)."""
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(DataError) as info:
        if attributes:
            after_cache(path, tokenizer, f"model.head.attributes=[{','.join(attributes)}]", *overrides(data))
        else:
            load_pairs(str(path), "train", [], DataConfig(**data))
    assert "\n" not in str(info.value)
    return str(info.value).split("data.jsonl:", 1)[1]


def overrides(data: dict) -> list[str]:
    return [f"data.{k}={v}" for k, v in data.items()]


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
ROW_2 = json.loads((FIXTURES / "helpsteer2_rows.jsonl").read_text().splitlines()[1])  # ROWS' prompt
MISSPELT = [
    ("pair-mapping", [PAIR | {"rejected_attributes": {"helpfullness": 1}}], "helpfullness"),
    ("pair-case", [PAIR | {"chosen_attributes": {"Helpfulness": 3}}], "Helpfulness"),
    ("row-mapping", [without(ROWS, "helpfulness") | {"attributes": {"helpfulnes": 2}}, ROW_2], "helpfulnes"),
    ("row-column", [without(ROWS, "helpfulness") | {"Helpfulness": 2}, ROW_2], "Helpfulness"),
    (
        "responses",
        [
            {
                "prompt": "Q?",
                "responses": [{"text": "a", "score": 1, "attributes": {"helpful-ness": 2}}, {"text": "b", "score": 0}],
            }
        ],
        "helpful-ness",
    ),  # fmt: skip
    ("ultrafeedback-annotation", [UF | {"completions": [UF["completions"][0], ANNOTATED]}], "Helpfulness"),
]


@pytest.mark.parametrize("case", MISSPELT, ids=[c[0] for c in MISSPELT])
def test_a_misspelt_attribute_key_is_named_with_the_configured_name(tmp_path, tokenizer, case):
    """After the cache: the data keeps every name, and the head's run names the record whose key is near its name
    (the response lacking the name itself)."""
    _, records, field = case
    score = {"score_field": "correctness"} if case[0].startswith("row") else {}  # a row's own score is not misspelt
    message = refused(tmp_path, records, ("helpfulness",), tokenizer, **score)
    assert message.startswith("1") and f": field {field!r} is not in model.head.attributes; did you mean" in message


def test_a_misspelt_configured_name_names_the_records_spelling(tmp_path, tokenizer):
    """Every HelpSteer2 row has `helpfulness`: the config's `helpfulnes` is the typo, and the message says both."""
    message = refused(tmp_path, [ROWS, ROW_2], ("helpfulnes",), tokenizer)
    assert "field 'helpfulness' is not in model.head.attributes; did you mean 'helpfulnes'" in message
    assert "the record's key or the config's name" in message


def test_other_keys_and_the_right_name_beside_a_near_one_are_left_alone(tmp_path, tokenizer):
    path = tmp_path / "data.jsonl"
    records = [
        PAIR | {"rejected_attributes": {"tone": 1, "honesty": 2}},  # unconfigured, not near: missing, as before
        PAIR | {"prompt": "R?", "rejected_attributes": {"helpfulness": 1, "Helpfulness": 9}},  # the name is there
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    data = after_cache(path, tokenizer, "model.head.attributes=[helpfulness]")
    scores = [list(g.attributes) for g in every(data)]
    assert len(scores) == 2 and any(math.isnan(s[1]) and s[0] == 3.0 for s in scores)  # missing, as before
    assert [3.0, 1.0] in scores


def test_skip_mode_counts_a_misspelt_key_and_keeps_the_rest(tmp_path, tokenizer):
    path = tmp_path / "data.jsonl"
    records = [PAIR, PAIR | {"prompt": "R?", "chosen_attributes": {"helpfulnss": 3}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    data = after_cache(path, tokenizer, "model.head.attributes=[helpfulness]", "data.on_bad_record=skip")
    assert len(every(data)) == 1 and data.report.skipped_counts() == {"misspelt_attribute": 1}
    assert data.report.skipped[0].field == "helpfulnss" and data.report.skipped[0].origin.endswith("data.jsonl:2")
