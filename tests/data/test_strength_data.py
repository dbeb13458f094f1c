"""Where a pair's preference strength comes from, read only with loss.strength=soft: HelpSteer2-Preference's
preference_strength (negative: response_1 better), a record's `strength`, chosen_score - rejected_score, Argilla's
mean ratings; the linear map to soft targets with the scale's max declared or inferred (stated in the data report);
the `target` column through encoding; a run without soft labels loads, encodes and keys its cache as before."""

import json
import math
import re

import pytest

from conftest import REPO
from rm.config import DataConfig, RunConfig
from rm.config.loss_config import LossConfig
from rm.data.formats.parse import detect_format
from rm.data.load import load_data, load_pairs
from rm.errors import DataError
from rm.tokens import cache
from rm.tokens.encode import encode_pairs
from rm.tokens.prepare import data_key
from rm.tokens.store import SCHEMA, schema_with

FIXTURES = REPO / "tests" / "fixtures"
PREFERENCE = FIXTURES / "helpsteer2_preference.jsonl"
SOFT = LossConfig(strength="soft")


def load(path, loss=None, **data):
    cfg = DataConfig(source=str(path), **data)
    return load_pairs(cfg.source, "train", [], cfg, loss=loss)


def test_helpsteer2_preference_gives_the_better_response_as_chosen():
    records = [json.loads(line) for line in PREFERENCE.read_text().splitlines()]
    assert {detect_format(r) for r in records} == {"helpsteer2-preference"}
    pairs = load(PREFERENCE)
    assert [p.chosen.strip() for p in pairs] == ["2 + 2 = 4.", "Red is a primary colour.", "Hello!", "Paris."]
    assert [p.rejected.strip() for p in pairs] == ["2 + 2 = 5.", "Green is made by mixing.", "Hi there!", "Lyon."]
    assert [p.tie for p in pairs] == [False, False, True, False]  # 0: about the same, a hard tie
    assert all(p.strength is None and p.target is None for p in pairs)  # not read without loss.strength=soft


def test_soft_strengths_map_linearly_with_the_max_inferred_and_stated(tmp_path):
    cfg = DataConfig(source=str(PREFERENCE), eval_split="", eval_fraction=0.25)
    loaded = load_data(cfg, tmp_path, loss=SOFT)
    items = loaded.train + loaded.eval
    by_prompt = {p.prompt: p for p in items}
    assert len(by_prompt) == 4 and not any(p.tie for p in items)  # s = 0 is p = 0.5, not a tie
    want = {"2 + 2": 0.5 + 2 / 6, "colour": 1.0, "hello": 0.5, "France": 0.5 + 1 / 6}
    for key, p in want.items():
        (item,) = [v for k, v in by_prompt.items() if key in k]
        assert item.target == pytest.approx(p, abs=1e-12)
    assert loaded.report.notes["strength"] == {"max": 3.0, "declared": False, "map": "linear", "soft": 4, "hard": 0}


def test_a_declared_max_maps_by_it_and_makes_larger_strengths_bad_records(tmp_path):
    cfg = DataConfig(source=str(PREFERENCE), eval_split="", eval_fraction=0.25)
    loaded = load_data(cfg, tmp_path, loss=LossConfig(strength="soft", strength_max=4.0))
    assert sorted(p.target for p in loaded.train + loaded.eval) == pytest.approx([0.5, 0.625, 0.75, 0.875])
    with pytest.raises(DataError, match=re.escape("helpsteer2_preference.jsonl:2")) as info:
        load(PREFERENCE, LossConfig(strength="soft", strength_max=2.0))
    assert "beyond loss.strength_max 2" in str(info.value)


def test_pairwise_records_strength_field_or_score_difference(tmp_path):
    records = [
        {"prompt": "a?", "chosen": "yes", "rejected": "no", "strength": 1.5},
        {"prompt": "b?", "chosen": "yes", "rejected": "no", "chosen_score": 7, "rejected_score": 4},
        {"prompt": "c?", "chosen": "yes", "rejected": "no", "chosen_score": 5, "rejected_score": 5},
        {"prompt": "d?", "chosen": "yes", "rejected": "no"},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [p.tie for p in load(path)] == [False, False, True, False]
    pairs = load(path, SOFT)
    assert [p.strength for p in pairs] == [1.5, 3.0, 0.0, None] and [p.tie for p in pairs] == [False] * 4
    loaded = load_data(DataConfig(source=str(path), eval_split="", eval_fraction=0.25), tmp_path, loss=SOFT)
    targets = {p.prompt: p.target for p in loaded.train + loaded.eval}
    got = [targets[k] for k in sorted(targets)]
    assert got[:3] == pytest.approx([0.75, 1.0, 0.5]) and math.isnan(got[3])  # no strength: a hard label
    assert loaded.report.notes["strength"]["hard"] == 1


def test_argilla_strength_is_the_mean_rating_difference():
    pairs = load(FIXTURES / "argilla_ja.jsonl", SOFT, format="argilla")
    assert [p.strength for p in pairs] == [None, 2.5, -1.0, 0.0, None, None]


def test_soft_without_any_strength_is_a_one_line_error(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps({"prompt": "a?", "chosen": "yes", "rejected": "no"}) + "\n")
    with pytest.raises(DataError, match="loss.strength=soft: no pair has a strength") as info:
        load_data(DataConfig(source=str(path), eval_split="", eval_fraction=0.5), tmp_path, loss=SOFT)
    assert "\n" not in str(info.value)


def test_targets_travel_through_encoding_and_a_hard_run_is_unchanged(tokenizer, tmp_path):
    cfg = DataConfig(source=str(PREFERENCE), eval_split="", eval_fraction=0.25)
    soft = load_data(cfg, tmp_path, loss=SOFT).train
    split, _ = encode_pairs(soft, tokenizer, 512, ["helpsteer2_preference"])
    assert split.table.schema.equals(schema_with(targeted=True))
    assert [g.target for g in split] == pytest.approx([p.target for p in soft])
    plain_items = load_data(cfg, tmp_path).train
    plain, _ = encode_pairs(plain_items, tokenizer, 512, ["helpsteer2_preference"])
    assert plain.table.schema.equals(SCHEMA) and all(math.isnan(g.target) for g in plain)
    run = RunConfig()
    before = cache.digest(cache.data_state(run.data), cache.tokenizer_state(tokenizer), run.collator.max_length)
    assert data_key(run, tokenizer) == before
    run.loss.strength = "soft"
    assert data_key(run, tokenizer) != before
