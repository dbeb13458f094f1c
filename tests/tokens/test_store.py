"""`EncodedSplit`: pairs read back from Arrow columns are the pairs written, in memory and memory-mapped from an
IPC file (as a cache would hold them)."""

import numpy as np
import pyarrow as pa
import pytest

from conftest import random_pairs
from rm.errors import DataError
from rm.tokens.entry import read_split, write_split
from rm.tokens.store import SCHEMA, EncodedGroup, EncodedSplit, join_ids, record_batch, split_to_table

FIELDS = ("prompt_ids", "chosen_ids", "rejected_ids")


def as_tuple(p: EncodedGroup) -> tuple:
    return (*(list(map(int, getattr(p, f))) for f in FIELDS), p.subset_id, p.margin, p.index)


def chunked(pairs: list[EncodedGroup], sizes: list[int]) -> EncodedSplit:
    """A split written as several record batches (the way an encoder or a cache writes one)."""
    batches, start = [], 0
    for n in sizes:
        batches.append(record_batch(pairs[start : start + n]))
        start += n
    return EncodedSplit.from_batches(batches)


@pytest.fixture
def pairs():
    out = random_pairs(50, 40, seed=3)
    out[5] = EncodedGroup.pair([], [7], [8, 9], 1, margin=0.25, index=5)  # an empty prompt
    return out


def test_pairs_read_back_as_written_from_one_or_many_batches(pairs):
    for split in (EncodedSplit.from_groups(pairs), chunked(pairs, [7, 0, 13, 20])):
        assert split.table.schema.equals(SCHEMA) and len(split) == len(pairs)
        assert [as_tuple(p) for p in split] == [as_tuple(p) for p in pairs]
        assert as_tuple(split[-1]) == as_tuple(pairs[-1]) and [as_tuple(p) for p in split[3:9:2]] == [
            as_tuple(p) for p in pairs[3:9:2]
        ]
        want = np.array([[len(getattr(p, f)) for f in FIELDS] for p in pairs]).T
        sizes = split.lengths()
        assert (sizes.prompt == want[0]).all() and (sizes.responses.reshape(-1, 2).T == want[1:]).all()
        with pytest.raises(IndexError):
            split[len(pairs)]


def test_from_table_round_trips_in_memory_and_through_a_memory_mapped_ipc_file(pairs, tmp_path):
    split = chunked(pairs, [10, 30])
    again = EncodedSplit(split.table)
    assert [as_tuple(p) for p in again] == [as_tuple(p) for p in pairs]
    path = tmp_path / "train.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_table(split.table)
    before = pa.total_allocated_bytes()
    with pa.memory_map(str(path), "r") as source:
        mapped = EncodedSplit(pa.ipc.open_file(source).read_all())
        assert [as_tuple(p) for p in mapped] == [as_tuple(p) for p in pairs]
        assert pa.total_allocated_bytes() - before < 4096  # ids are read from the mapped pages, not copied
        # A slice of a mapped table (offsets that do not start at 0) reads the right pairs too.
        sliced = EncodedSplit(mapped.table.slice(12, 20))
        assert [as_tuple(p) for p in sliced] == [as_tuple(p) for p in pairs[12:32]]


def test_a_table_of_another_shape_is_refused(pairs):
    table = EncodedSplit.from_groups(pairs).table
    with pytest.raises(DataError, match="margin"):
        EncodedSplit(table.set_column(4, "margin", table.column("margin").cast(pa.float32())))
    nulls = pa.array([None] * len(pairs), type=pa.int32())
    with pytest.raises(DataError, match="subset_id"):
        EncodedSplit(table.set_column(3, SCHEMA.field("subset_id"), nulls))


def test_join_ids_concatenates_lists_and_arrays():
    a = np.array([5, 6], dtype=np.int32)
    assert join_ids(a, [7], np.zeros(0, dtype=np.int32), []).tolist() == [5, 6, 7]
    assert (a + a).tolist() == [10, 12]  # why `+` must not join ids


def test_splits_round_trip_through_ipc_files_that_datasets_opens(tmp_path):
    pairs = random_pairs(300, 50, seed=3)
    table = split_to_table(pairs)
    assert table.schema == SCHEMA and [as_tuple(p) for p in EncodedSplit(table)] == [as_tuple(p) for p in pairs]
    write_split(pairs, tmp_path / "train.arrow")
    assert [as_tuple(p) for p in read_split(tmp_path / "train.arrow")] == [as_tuple(p) for p in pairs]
    assert split_to_table([]).num_rows == 0 and len(EncodedSplit(split_to_table([]))) == 0
    split = EncodedSplit(table)
    assert split_to_table(split) is table  # a split that already is a table is stored as it is
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_file(str(tmp_path / "train.arrow"))
    assert ds[7]["response_ids"] == [pairs[7].chosen_ids, pairs[7].rejected_ids] and ds[7]["rank"] == [0, 1]


def groups_of_mixed_size(n: int, seed: int) -> list[EncodedGroup]:
    """Groups of 2 to 4 responses with ranks that include ties: what K responses per prompt will hold."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(2, 5))
        responses = [rng.integers(0, 50, int(rng.integers(1, 9))).tolist() for _ in range(k)]
        ranks = rng.integers(0, k, k).tolist()
        out.append(
            EncodedGroup(
                rng.integers(0, 50, int(rng.integers(0, 12))).tolist(), responses, ranks, i % 3, margin=0.0, index=i
            )
        )
    return out


def as_plain(g: EncodedGroup) -> tuple:
    return (
        [int(t) for t in g.prompt_ids],
        [[int(t) for t in r] for r in g.response_ids],
        list(g.rank),
        g.subset_id,
        g.index,
    )


def test_groups_of_any_size_read_back_with_their_lengths(tmp_path):
    groups = groups_of_mixed_size(60, seed=5)
    write_split(chunked(groups, [11, 0, 30, 19]), tmp_path / "g.arrow")
    mapped = read_split(tmp_path / "g.arrow")
    for split in (mapped, EncodedSplit(mapped.table.slice(9, 40))):
        want = groups if len(split) == len(groups) else groups[9:49]
        assert [as_plain(g) for g in split] == [as_plain(g) for g in want]
        sizes = split.lengths()
        assert sizes.prompt.tolist() == [len(g.prompt_ids) for g in want]
        assert sizes.responses.tolist() == [len(r) for g in want for r in g.response_ids]
        assert np.diff(sizes.starts).tolist() == [len(g.response_ids) for g in want]
        assert sizes.segment.tolist() == [len(g.prompt_ids) + sum(map(len, g.response_ids)) for g in want]
        assert sizes.widest.tolist() == [len(g.prompt_ids) + max(map(len, g.response_ids)) for g in want]
        picked = np.array([3, 0, 7])
        expect = [len(want[i].prompt_ids) + len(r) for i in picked.tolist() for r in want[i].response_ids]
        assert sizes.sequences(picked).tolist() == expect
    with pytest.raises(ValueError, match="group of 3"):
        _ = next(g for g in mapped if len(g.response_ids) == 3).chosen_ids


def test_a_groups_labels_are_given_by_name():
    """Past the prompt, responses, order and subset, every value is a keyword: a margin written where an index was
    meant (11 positional values, as encode.py and store.py built groups) is a TypeError, not a wrong label."""
    with pytest.raises(TypeError):
        EncodedGroup([5], [[6], [7]], [0, 1], 0, 0.5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        EncodedGroup.pair([5], [6], [7], 0, 0.5)  # type: ignore[misc]
    group = EncodedGroup([5], [[6], [7]], [0, 1], 0, margin=0.5, index=3)
    assert (group.margin, group.index) == (0.5, 3) and EncodedGroup.pair([5], [6], [7], 0, index=3).index == 3
