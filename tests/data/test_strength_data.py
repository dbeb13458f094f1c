"""Where a pair's preference strength comes from, read whatever the loss: HelpSteer2-Preference's
preference_strength (negative: response_1 better), a record's `strength`, chosen_score - rejected_score, Argilla's
mean ratings. Under loss.strength=soft, after the cache (rm/collate/loss_labels.py): the linear map to soft targets
with the scale's max declared or inferred (stated in the data report), a strength beyond a declared max a bad
record, pairs with a strength untied; `rm eval`'s item-level map gives the same targets. The cache key is the
same for soft and hard runs."""

import json
import math
import re

import pytest

from conftest import REPO
from rm.collate.loss_labels import for_loss
from rm.config import DataConfig, RunConfig
from rm.config.loss_config import LossConfig
from rm.data.formats.parse import detect_format
from rm.data.load import eval_pairs, load_data, load_pairs
from rm.errors import DataError
from rm.tokens.prepare import data_key, encoded
from rm.tokens.store import schema_with

FIXTURES = REPO / "tests" / "fixtures"
PREFERENCE = FIXTURES / "helpsteer2_preference.jsonl"
SOFT = LossConfig(strength="soft")


def load(path, **data):
    cfg = DataConfig(source=str(path), **data)
    return load_pairs(cfg.source, "train", [], cfg)


def prepared(path, tokenizer, tmp_path, loss=SOFT, **data):
    """The data as training has it after the cache and `for_loss`."""
    run = RunConfig(data=DataConfig(source=str(path), eval_split="", **data), loss=loss)
    data = encoded(run, load_data(run.data, tmp_path), tokenizer, False)
    for_loss(run, data)
    return data


def in_file_order(data):
    """Every encoded group of both splits in its record's line order (its origin "file:line")."""
    rows = [(int(split.origin(i).rsplit(":", 1)[1]), split[i]) for split in (data.train, data.eval)
            for i in range(len(split))]  # fmt: skip
    return [g for _, g in sorted(rows, key=lambda r: r[0])]


def test_helpsteer2_preference_gives_the_better_response_as_chosen_and_its_strength():
    records = [json.loads(line) for line in PREFERENCE.read_text().splitlines()]
    assert {detect_format(r) for r in records} == {"helpsteer2-preference"}
    pairs = load(PREFERENCE)
    assert [p.chosen.strip() for p in pairs] == ["2 + 2 = 4.", "Red is a primary colour.", "Hello!", "Paris."]
    assert [p.rejected.strip() for p in pairs] == ["2 + 2 = 5.", "Green is made by mixing.", "Hi there!", "Lyon."]
    assert [p.tie for p in pairs] == [False, False, True, False]  # 0: about the same, a hard tie
    assert [p.strength for p in pairs] == [2.0, 3.0, 0.0, 1.0] and all(p.target is None for p in pairs)


def test_soft_strengths_map_linearly_with_the_max_inferred_and_stated(tokenizer, tmp_path):
    data = prepared(PREFERENCE, tokenizer, tmp_path)
    groups = in_file_order(data)
    assert [g.target for g in groups] == pytest.approx([0.5 + 2 / 6, 1.0, 0.5, 0.5 + 1 / 6], abs=1e-12)
    assert [list(g.rank) for g in groups] == [[0, 1]] * 4  # s = 0 is p = 0.5, not a tie
    assert data.report.notes["strength"] == {"max": 3.0, "declared": False, "map": "linear", "soft": 4, "hard": 0}
    hard = prepared(PREFERENCE, tokenizer, tmp_path / "hard", LossConfig())
    assert [list(g.rank) for g in in_file_order(hard)][2] == [0, 0] and "target" not in hard.train.table.schema.names


def test_a_declared_max_maps_by_it_and_makes_larger_strengths_bad_records(tokenizer, tmp_path):
    data = prepared(PREFERENCE, tokenizer, tmp_path, LossConfig(strength="soft", strength_max=4.0))
    assert sorted(g.target for g in in_file_order(data)) == pytest.approx([0.5, 0.625, 0.75, 0.875])
    with pytest.raises(DataError, match=re.escape("helpsteer2_preference.jsonl:2: its strength 3 is beyond")) as info:
        prepared(PREFERENCE, tokenizer, tmp_path / "2", LossConfig(strength="soft", strength_max=2.0))
    assert "beyond loss.strength_max 2" in str(info.value)
    skipping = LossConfig(strength="soft", strength_max=2.0)
    data = prepared(PREFERENCE, tokenizer, tmp_path / "skip", skipping, on_bad_record="skip")
    assert len(in_file_order(data)) == 3 and data.report.skipped_counts() == {"out_of_range": 1}
    assert [[g.index for g in split] for split in (data.train, data.eval)] == [[0, 1][: len(data.train)], [0]]
    assert data.report.notes["strength"] == {"max": 2.0, "declared": True, "map": "linear", "soft": 3, "hard": 0}


def test_pairwise_records_strength_field_or_score_difference(tokenizer, tmp_path):
    records = [
        {"prompt": "a?", "chosen": "yes", "rejected": "no", "strength": 1.5},
        {"prompt": "b?", "chosen": "yes", "rejected": "no", "chosen_score": 7, "rejected_score": 4},
        {"prompt": "c?", "chosen": "yes", "rejected": "no", "chosen_score": 5, "rejected_score": 5},
        {"prompt": "d?", "chosen": "yes", "rejected": "no"},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    pairs = load(path)
    assert [p.tie for p in pairs] == [False, False, True, False]
    assert [p.strength for p in pairs] == [1.5, 3.0, 0.0, None]
    data = prepared(path, tokenizer, tmp_path)
    got = [g.target for g in in_file_order(data)]
    assert got[:3] == pytest.approx([0.75, 1.0, 0.5]) and math.isnan(got[3])  # no strength: a hard label
    assert [list(g.rank) for g in in_file_order(data)] == [[0, 1]] * 4
    assert data.report.notes["strength"]["hard"] == 1


def test_rm_eval_maps_its_items_to_the_targets_training_gives_its_splits(tokenizer, tmp_path):
    held = eval_pairs(DataConfig(source=str(PREFERENCE), eval_split="", eval_fraction=1.0), loss=SOFT)
    by_prompt = {p.prompt: p.target for p in held}
    trained = prepared(PREFERENCE, tokenizer, tmp_path)
    items = load(PREFERENCE)
    assert [by_prompt[p.prompt] for p in items] == [g.target for g in in_file_order(trained)]
    assert not any(p.tie for p in held)


def test_argilla_strength_is_the_mean_rating_difference():
    pairs = load(FIXTURES / "argilla_ja.jsonl", format="argilla")
    assert [p.strength for p in pairs] == [None, 2.5, -1.0, 0.0, None, None]


def test_soft_without_any_strength_is_a_one_line_error(tokenizer, tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps({"prompt": "a?", "chosen": "yes", "rejected": "no"}) + "\n")
    with pytest.raises(DataError, match="loss.strength=soft: no pair has a strength") as info:
        prepared(path, tokenizer, tmp_path)
    assert "\n" not in str(info.value)


def test_strengths_are_stored_whatever_the_loss_and_the_key_is_the_same(tokenizer, tmp_path):
    run = RunConfig(data=DataConfig(source=str(PREFERENCE), eval_split=""))
    data = encoded(run, load_data(run.data, tmp_path), tokenizer, False)
    assert data.train.table.schema.equals(schema_with(["strength"]))
    groups = in_file_order(data)
    assert [g.strength for g in groups] == [2.0, 3.0, 0.0, 1.0] and all(math.isnan(g.target) for g in groups)
    before = data_key(run, tokenizer)
    run.loss.strength, run.loss.strength_max = "soft", 3.0
    assert data_key(run, tokenizer) == before
