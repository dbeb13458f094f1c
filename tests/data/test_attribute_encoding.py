"""Attribute scores through the encoded unit and the collators: encoded per kept response, kept in an
Arrow column that a cache file round-trips, and collated as [responses, A] in reward order in every layout; a
split without attributes keeps the old columns and batches, and the cache key is the same either way."""

import math

import numpy as np
import pytest
import torch

from conftest import REPO
from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator, response_order
from rm.config import DataConfig, RunConfig
from rm.data.formats.group import responses_of
from rm.data.load import load_pairs
from rm.tokens import cache
from rm.tokens.encode import encode_pairs
from rm.tokens.entry import read_split, write_split
from rm.tokens.prepare import data_key
from rm.tokens.store import SCHEMA, EncodedGroup, EncodedSplit, schema_with

FIXTURE = REPO / "tests" / "fixtures" / "helpsteer2_rows.jsonl"
NAMES = ["correctness", "verbosity"]


def loaded():
    cfg = DataConfig(source=str(FIXTURE))
    return load_pairs(cfg.source, "train", [], cfg)


def test_encoded_groups_carry_each_kept_responses_scores_and_round_trip_a_cache_file(tokenizer, tmp_path):
    items = loaded()
    split, _ = encode_pairs(items, tokenizer, 512, ["default", "helpsteer2_rows"], attribute_names=NAMES)
    assert split.table.schema.equals(schema_with(["attributes"])) and len(split) == len(items)
    for item, group in zip(items, split, strict=True):
        assert len(group.attributes) == len(NAMES) * len(responses_of(item))
        assert group.attributes == [scores.get(name, math.nan) for scores in item.attributes for name in NAMES]
    write_split(split, tmp_path / "train.arrow")
    again = read_split(tmp_path / "train.arrow")
    assert [g.attributes for g in again] == [g.attributes for g in split]
    plain, _ = encode_pairs(loaded(), tokenizer, 512, ["default", "helpsteer2_rows"], attribute_names=[])
    assert plain.table.schema.equals(SCHEMA) and all(g.attributes == () for g in plain)
    same = plain.table.drop_columns(["origin"])  # stored where a label can make a bad record after the cache
    assert same.equals(split.table.drop_columns(["attributes", "origin"]))  # the same groups, ids and order


def groups_with_scores():
    """Three groups of 2, 3 and 2 responses, A = 2, NaN where missing."""
    nan = math.nan
    return [
        EncodedGroup([5, 6], [[8], [11, 12]], [0, 1], 0, attributes=[1.0, 2.0, 3.0, nan]),
        EncodedGroup([7], [[9, 10], [13], [14]], [0, 1, 2], 0, attributes=[4.0, 5.0, nan, nan, 6.0, 7.0]),
        EncodedGroup([3, 4, 2], [[15], [16, 17]], [1, 0], 0, attributes=[8.0, 9.0, 10.0, 11.0]),
    ]


@pytest.mark.parametrize("collator", [PaddedCollator(0), SharedCollator(0), PackedCollator(0)])
def test_collators_give_scores_in_reward_order_and_nothing_without_them(collator):
    batch = groups_with_scores()
    out = collator(batch)
    want = [batch[i].attributes[2 * k : 2 * k + 2] for i, k in response_order(batch)]
    assert torch.equal(out["attributes"].isnan(), torch.tensor(np.isnan(want)))
    assert torch.equal(out["attributes"].nan_to_num(-1), torch.tensor(want).nan_to_num(-1))
    plain = [EncodedGroup(g.prompt_ids, g.response_ids, g.rank, g.subset_id) for g in batch]
    before = collator(plain)
    assert set(out) - set(before) == {"attributes"}
    assert all(torch.equal(before[k], out[k]) for k in before)


def test_a_split_from_scored_groups_round_trips_them():
    split = EncodedSplit.from_groups(groups_with_scores())
    assert split.table.schema.equals(schema_with(["attributes"]))
    for got, want in zip(split, groups_with_scores(), strict=True):
        np.testing.assert_array_equal(got.attributes, want.attributes)  # NaN where NaN


def test_the_cache_key_is_the_same_with_attributes_or_without(tokenizer):
    """Every name's scores are cached; the head takes its own after the cache (rm/collate/loss_labels.py)."""
    cfg = RunConfig()
    before = cache.digest(cache.data_state(cfg.data), cache.tokenizer_state(tokenizer), cfg.collator.max_length)
    assert data_key(cfg, tokenizer) == before
    cfg.model.head.attributes, cfg.model.head.attribute_scales = ["verbosity"], {"verbosity": [0, 4]}
    assert data_key(cfg, tokenizer) == before
