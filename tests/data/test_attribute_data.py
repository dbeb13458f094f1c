"""Per-response attribute scores (rm/data/formats/attributes.py), read from fixtures in each dataset's
published field names and compared with the values read straight from the JSON: HelpSteer2 rows, UltraFeedback
annotations, pairs' chosen_attributes/rejected_attributes; NaN for a missing score; out-of-range scores as bad
records by file:line; scales declared or inferred into the data report; an attribute no record has is an error;
and without attributes configured, loading gives exactly what it gave before."""

import json
import math
import re
from types import SimpleNamespace

import pytest

from conftest import REPO
from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.formats.group import responses_of
from rm.data.load import load_data, load_pairs
from rm.errors import DataError

FIXTURES = REPO / "tests" / "fixtures"
HS2 = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")
NAN = float("nan")


def head(attributes, scales=None):
    return SimpleNamespace(attributes=list(attributes), attribute_scales=scales or {})


def load(name, attributes=(), scales=None, **data):
    cfg = DataConfig(source=str(FIXTURES / name), **data)
    return load_pairs(cfg.source, "train", [], cfg, head=head(attributes, scales) if attributes else None)


def same(a, b):
    """Equal score tuples, NaN equal to NaN."""
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True))


def by_text(items):
    return {(item.prompt, r): s for item in items for r, s in zip(responses_of(item), item.attributes, strict=True)}


def test_helpsteer2_rows_carry_their_five_columns_per_response():
    items = load("helpsteer2_rows.jsonl", HS2)
    got = by_text(items)
    rows = [json.loads(line) for line in (FIXTURES / "helpsteer2_rows.jsonl").read_text().splitlines()]
    scored = [r for r in rows if r["helpfulness"] is not None]  # an unscored row is left out of its group
    assert len(got) == len(scored)
    for row in scored:
        key = (f"\n\nHuman: {row['prompt']}\n\nAssistant:", " " + row["response"])
        assert same(got[key], tuple(float(row[name]) for name in HS2))


def test_ultrafeedback_reads_annotation_ratings_and_own_fields():
    names = ("helpfulness", "honesty", "fine-grained_score")
    items = load("ultrafeedback.jsonl", names)
    records = [json.loads(line) for line in (FIXTURES / "ultrafeedback.jsonl").read_text().splitlines()]
    want = []
    for record in records:
        for c in record["completions"]:
            if c["overall_score"] in ("N/A", None):
                continue
            ratings = [c["annotations"].get(n, {}).get("Rating") for n in names[:2]]
            want.append(tuple(NAN if v in ("N/A", None) else float(v) for v in ratings) + (c["fine-grained_score"],))
    got = [s for item in items for s in item.attributes]
    assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want, strict=True))


def test_pairs_read_chosen_and_rejected_attributes_and_missing_is_nan(tmp_path):
    items = load("pairs_attributes.jsonl", ("correctness", "verbosity"))
    assert [i.attributes for i in items][0] == ((4.0, 0.0), (0.0, 0.0))
    assert same(items[1].attributes[1], (NAN, NAN)) and items[1].attributes[0] == (4.0, 2.0)
    assert all(same(s, (NAN, NAN)) for s in items[2].attributes)  # a record without scores: every one missing


def test_rows_may_give_an_attributes_mapping(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [
        {"prompt": "p", "response": "a", "score": 2, "attributes": {"tone": 1.5}},
        {"prompt": "p", "response": "b", "score": 1, "attributes": {"tone": "N/A"}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DataConfig(source=str(path), score_field="score")
    (group,) = load_pairs(cfg.source, "train", [], cfg, head=head(["tone"]))
    assert group.attributes[0] == (1.5,) and math.isnan(group.attributes[1][0])


def test_a_score_outside_its_declared_scale_is_a_bad_record_by_line():
    with pytest.raises(DataError, match=re.escape("helpsteer2_rows.jsonl:6")) as info:
        load("helpsteer2_rows.jsonl", ["verbosity"], {"verbosity": [0, 1]})
    assert "verbosity" in str(info.value) and "outside model.head.attribute_scales.verbosity [0, 1]" in str(info.value)
    report = DataReport("skip")
    cfg = DataConfig(source=str(FIXTURES / "helpsteer2_rows.jsonl"), on_bad_record="skip")
    kept = load_pairs(cfg.source, "train", [], cfg, report=report, head=head(["verbosity"], {"verbosity": [0, 1]}))
    assert report.skipped_counts() == {"out_of_range": 1}
    assert all(max(s[0] for s in g.attributes) <= 1 for g in kept)


def test_scales_are_stated_in_the_data_report_declared_or_inferred(tmp_path):
    cfg = DataConfig(source=str(FIXTURES / "helpsteer2_rows.jsonl"), eval_split="", eval_fraction=0.3)
    loaded = load_data(cfg, tmp_path, head=head(["verbosity", "coherence"], {"coherence": [0, 4]}))
    notes = loaded.report.notes["attributes"]
    rows = [json.loads(line) for line in (FIXTURES / "helpsteer2_rows.jsonl").read_text().splitlines()]
    verbosity = [r["verbosity"] for r in rows if r["helpfulness"] is not None]
    assert notes["verbosity"] == {
        "scale": [min(verbosity), max(verbosity)],
        "declared": False,
        "scored": 7,
        "missing": 0,
    }
    assert notes["coherence"]["scale"] == [0.0, 4.0] and notes["coherence"]["declared"] is True


def test_an_attribute_no_record_has_is_a_one_line_error(tmp_path):
    cfg = DataConfig(source=str(FIXTURES / "helpsteer2_rows.jsonl"), eval_split="", eval_fraction=0.3)
    with pytest.raises(DataError, match="model.head.attributes: 'usefulness' is scored in no record") as info:
        load_data(cfg, tmp_path, head=head(["usefulness"]))  # a misspelt name is a bad record: test_record_fields.py
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["helpsteer2_rows.jsonl", "ultrafeedback.jsonl", "pairs_attributes.jsonl"])
def test_without_attributes_loading_is_as_before(name):
    """No head, or a head with no attributes: the items carry no scores and equal each other field by field."""
    plain = load(name)
    cfg = DataConfig(source=str(FIXTURES / name))
    again = load_pairs(cfg.source, "train", [], cfg, head=head([]))
    assert plain == again and all(item.attributes is None for item in plain)
