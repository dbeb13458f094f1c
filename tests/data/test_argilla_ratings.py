"""Argilla's annotator ratings as an attribute: a response's `rating` score (trained with
`model.head.attributes: [rating]`) is the mean of its submitted annotators' 1-5 ratings, and the data report counts
annotators per response. The
records are written here in the published field names of hironow/test-hh-rlhf-12k-ja's card (its `datasets` form)."""

import json

import pytest

from conftest import after_cache, every
from rm.config import ArgillaConfig, DataConfig
from rm.data.data_report import DataReport
from rm.data.load import load_pairs
from rm.errors import DataError

NO_SUGGESTION = {"agent": None, "score": None, "type": None}


def record(question: str, good: str, bad: str, chosen_rating, rejected_rating, modify_rejected=()) -> dict:
    """One record with every column of the card's `datasets` example."""
    out = {"external_id": None, "metadata": json.dumps({"source": "helpful-base"})}
    out |= {"chosen": f"user: {question}\nassistant: {good}\n", "rejected": f"user: {question}\nassistant: {bad}\n"}
    out |= {"chosen_rating": chosen_rating, "rejected_rating": rejected_rating}
    out |= {"modify_chosen": [], "modify_rejected": list(modify_rejected)}
    for name in ("chosen_rating", "rejected_rating", "modify_chosen", "modify_rejected"):
        out |= {f"{name}-suggestion": None, f"{name}-suggestion-metadata": dict(NO_SUGGESTION)}
    return out


def rating(user: str, value, status: str = "submitted") -> dict:
    return {"user_id": user, "value": value, "status": status}


CHOSEN_1 = [rating("u1", 4), rating("u2", 5), rating("u3", 1, "discarded")]
EDIT_1 = [{"user_id": "u2", "value": "太陽の光が散乱するためです。", "status": "submitted"}]
COLUMNAR_3 = {"user_id": ["a", "b", "c"], "value": [3, 5, 4], "status": ["submitted"] * 3}
RECORDS = [
    # chosen: 4 and 5 submitted, a discarded 1 left out -> 4.5 by 2 annotators; rejected: 2 by 1; an edit of rejected
    record("空はなぜ青いの", "光が散らばるからです。", "知りません。", CHOSEN_1, [rating("u1", 2)], EDIT_1),
    # no one rated either side: both scores missing, 0 annotators each
    record("カレーの作り方", "材料を切って煮ます。", "さあ。", [], []),
    # the columnar form `datasets` gives a Sequence of dicts: chosen 3, 5, 4 -> 4.0 by 3; rejected only a draft
    record("挨拶して", "こんにちは。", "…", COLUMNAR_3, [rating("a", 1, "draft")]),
]


def written(tmp_path):
    path = tmp_path / "ja.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in RECORDS))
    return path


def load(tmp_path, report, **argilla):
    return load_pairs(str(written(tmp_path)), "train", [], DataConfig(argilla=ArgillaConfig(**argilla)), report=report)


def scores(pair) -> list[float | None]:
    return [s.get("rating") for s in pair.attributes] if pair.attributes else [None, None]


def test_rating_is_the_mean_of_submitted_ratings_and_annotators_are_counted(tmp_path):
    report = DataReport()
    pairs = load(tmp_path, report, pairs_from_edits=True)
    assert [p.origin.split(":", 1)[1] for p in pairs] == ["1", "1 (edit: modify_rejected[0])", "2", "3"]
    assert [scores(p) for p in pairs] == [[4.5, 2.0], [None, 2.0], [None, None], [4.0, None]]
    assert pairs[1].chosen.endswith("太陽の光が散乱するためです。")  # the edit, rated by no one
    # six responses: 2, 1 (record 1), 0, 0 (record 2), 3, 0 (record 3; the draft is not a rating)
    assert report.notes["argilla"]["annotators_per_response"] == {"0": 3, "1": 1, "2": 1, "3": 1}
    assert "annotators_per_response" in " ".join(report.describe())


def test_a_mean_outside_the_declared_scale_is_a_bad_record(tmp_path, tokenizer):
    run = ("model.head.attributes=[rating]", "model.head.attribute_scales={rating: [1.0, 4.0]}")
    with pytest.raises(DataError, match=r"ja\.jsonl:1: attribute 'rating' is 4\.5, outside .*rating \[1, 4\]"):
        after_cache(written(tmp_path), tokenizer, *run)
    data = after_cache(written(tmp_path), tokenizer, *run, "data.on_bad_record=skip")
    assert len(every(data)) == 2 and data.report.skipped_counts() == {"out_of_range": 1}


def test_a_run_without_rating_trains_no_score(tmp_path, tokenizer):
    data = after_cache(written(tmp_path), tokenizer)
    assert all("attributes" not in split.table.schema.names for split in (data.train, data.eval))
    assert data.report.notes["labels"]["attributes"]["names"]["rating"]["scored"] == 3
