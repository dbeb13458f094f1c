"""Stepwise groups keep their step ends and labels through an encoded split's Arrow columns, groups without
steps beside them read none, and a split of pairs has no step columns at all."""

import pyarrow as pa
import pytest

from rm.tokens.store import EncodedGroup, EncodedSplit


def group(ends, labels, index):
    responses = [list(range(1, e[-1] + 2)) if e else [7] for e in ends]
    return EncodedGroup([1, 2], responses, [0] * len(ends), 0, index=index, step_ends=ends, step_labels=labels)


def test_steps_round_trip_through_the_columns():
    groups = [
        group([[0, 2, 5], [1]], [[1.0, 0.7, 0.0], [0.25]], 0),
        group([[3]], [[1.0]], 1),
        group([[0, 1], [2, 4], [0]], [[1.0, 1.0], [0.0, 0.0], [0.5]], 2),
    ]
    split = EncodedSplit.from_groups(groups)
    assert {"step_counts", "step_ends", "step_labels"} <= set(split.table.schema.names)
    for g, back in zip(groups, split, strict=True):
        assert back.step_ends == g.step_ends and back.step_labels == g.step_labels
    # record batches read apart, as a memory-mapped cache file's are
    chunked = EncodedSplit(pa.concat_tables([split.table.slice(0, 1), split.table.slice(1)]))
    assert [g.step_labels for g in chunked] == [g.step_labels for g in groups]


def test_scoring_groups_keep_ends_without_labels_and_pairs_have_no_step_columns():
    split = EncodedSplit.from_groups([group([[0, 2], [1]], [], 0)])
    assert split[0].step_ends == [[0, 2], [1]] and split[0].step_labels == []
    pairs = EncodedSplit.from_groups([EncodedGroup.pair([1], [2], [3], 0)])
    assert "step_ends" not in pairs.table.schema.names and pairs[0].step_ends == ()


def test_labels_that_do_not_match_the_ends_are_refused():
    with pytest.raises(ValueError, match="3 step ends has 2 step labels"):
        EncodedSplit.from_groups([group([[0, 1, 2]], [[1.0, 0.0]], 0)])
