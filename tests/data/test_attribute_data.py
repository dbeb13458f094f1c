"""Per-response attribute scores (rm/data/formats/attributes.py), read whatever the head from fixtures in each
dataset's published field names and compared with the values read straight from the JSON: HelpSteer2 rows,
UltraFeedback annotations, pairs' chosen_attributes/rejected_attributes; a missing score is absent. After the
cache a run's head takes its names (rm/collate/loss_labels.py): out-of-range scores are bad records by file:line,
scales declared or inferred go into the data report, an attribute no record has is an error, and a run without
attributes has no scores in its splits."""

import json
import shutil

import pytest

from conftest import REPO, after_cache, every
from rm.config import DataConfig
from rm.data.formats.group import responses_of
from rm.data.load import load_pairs
from rm.errors import DataError

FIXTURES = REPO / "tests" / "fixtures"
HS2 = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")


def load(name, **data):
    cfg = DataConfig(source=str(FIXTURES / name), **data)
    return load_pairs(cfg.source, "train", [], cfg)


def copied(name, tmp_path):
    return shutil.copy(FIXTURES / name, tmp_path / name)


def by_text(items):
    return {(item.prompt, r): s for item in items for r, s in zip(responses_of(item), item.attributes, strict=True)}


def test_helpsteer2_rows_carry_their_five_columns_per_response():
    got = by_text(load("helpsteer2_rows.jsonl"))
    rows = [json.loads(line) for line in (FIXTURES / "helpsteer2_rows.jsonl").read_text().splitlines()]
    scored = [r for r in rows if r["helpfulness"] is not None]  # an unscored row is left out of its group
    assert len(got) == len(scored)
    for row in scored:
        key = (f"\n\nHuman: {row['prompt']}\n\nAssistant:", " " + row["response"])
        assert got[key] == {name: float(row[name]) for name in HS2 if row[name] is not None}


def test_ultrafeedback_reads_annotation_ratings_and_own_fields():
    items = load("ultrafeedback.jsonl")
    records = [json.loads(line) for line in (FIXTURES / "ultrafeedback.jsonl").read_text().splitlines()]
    want = []
    for record in records:
        for c in record["completions"]:
            if c["overall_score"] in ("N/A", None):
                continue
            rated = {n: float(a["Rating"]) for n, a in c["annotations"].items() if a.get("Rating") not in ("N/A", None)}
            own = {k: float(v) for k, v in c.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            want.append(rated | own)
    got = [s for item in items for s in item.attributes]
    assert got == want and all("fine-grained_score" in s for s in got)


def test_pairs_read_chosen_and_rejected_attributes_and_missing_is_absent():
    items = load("pairs_attributes.jsonl")
    assert items[0].attributes == ({"correctness": 4.0, "verbosity": 0.0}, {"correctness": 0.0, "verbosity": 0.0})
    assert items[1].attributes[0] == {"correctness": 4.0, "verbosity": 2.0}
    assert "correctness" not in items[1].attributes[1] and items[2].attributes is None  # a record without scores


def test_rows_may_give_an_attributes_mapping(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [
        {"prompt": "p", "response": "a", "score": 2, "attributes": {"tone": 1.5}},
        {"prompt": "p", "response": "b", "score": 1, "attributes": {"tone": "N/A"}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DataConfig(source=str(path), score_field="score")
    (group,) = load_pairs(cfg.source, "train", [], cfg)
    assert group.attributes == ({"tone": 1.5, "score": 2.0}, {"score": 1.0})  # a JSON-number column is one too


def test_a_score_outside_its_declared_scale_is_a_bad_record_by_line(tmp_path, tokenizer):
    path = copied("helpsteer2_rows.jsonl", tmp_path)
    run = ("model.head.attributes=[verbosity]", "model.head.attribute_scales={verbosity: [0, 1]}")
    with pytest.raises(DataError, match=r"helpsteer2_rows.jsonl:[\d+]*\+6: attribute 'verbosity' is \d") as info:
        after_cache(path, tokenizer, *run)
    assert "outside model.head.attribute_scales.verbosity [0, 1]" in str(info.value)
    data = after_cache(path, tokenizer, *run, "data.on_bad_record=skip")
    assert data.report.skipped_counts() == {"out_of_range": 1}
    assert all(max(g.attributes) <= 1 for g in every(data))


def test_scales_are_stated_in_the_data_report_declared_or_inferred(tmp_path, tokenizer):
    path = copied("helpsteer2_rows.jsonl", tmp_path)
    run = ("model.head.attributes=[verbosity, coherence]", "model.head.attribute_scales={coherence: [0, 4]}")
    notes = after_cache(path, tokenizer, *run).report.notes["attributes"]
    rows = [json.loads(line) for line in (FIXTURES / "helpsteer2_rows.jsonl").read_text().splitlines()]
    verbosity = [r["verbosity"] for r in rows if r["helpfulness"] is not None]
    assert notes["verbosity"] == {
        "scale": [min(verbosity), max(verbosity)],
        "declared": False,
        "scored": 7,
        "missing": 0,
    }
    assert notes["coherence"]["scale"] == [0.0, 4.0] and notes["coherence"]["declared"] is True


def test_an_attribute_no_record_has_is_a_one_line_error(tmp_path, tokenizer):
    path = copied("helpsteer2_rows.jsonl", tmp_path)
    with pytest.raises(DataError, match="model.head.attributes: 'usefulness' is scored in no record") as info:
        after_cache(path, tokenizer, "model.head.attributes=[usefulness]")  # a misspelt name: test_record_fields.py
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["helpsteer2_rows.jsonl", "ultrafeedback.jsonl", "pairs_attributes.jsonl"])
def test_the_cache_holds_every_name_and_a_run_without_attributes_none(name, tmp_path, tokenizer):
    from rm.data.load import load_data
    from rm.tokens.prepare import encoded

    path = copied(name, tmp_path)
    data = after_cache(path, tokenizer)
    assert "attributes" not in data.train.table.schema.names and "attributes" not in data.eval.table.schema.names
    loaded = load_data(DataConfig(source=str(path), eval_split=""), tmp_path)
    names = list(loaded.report.notes["labels"]["attributes"]["names"])
    assert names == sorted({n for item in loaded.train + loaded.eval for s in item.attributes or () for n in s})
    cached = encoded(data_run(path), loaded, tokenizer, False)
    width = {len(g.attributes) // len(g.response_ids) for g in [*cached.train, *cached.eval]}
    assert width == {len(names)}


def data_run(path):
    from rm.config import RunConfig

    return RunConfig(data=DataConfig(source=str(path), eval_split=""))
