"""`EncodedSplit`: pairs read back from Arrow columns are the pairs written, in memory and memory-mapped from an
IPC file (as a cache would hold them)."""

import numpy as np
import pyarrow as pa
import pytest

from conftest import random_pairs
from rm.errors import DataError
from rm.tokens.store import SCHEMA, EncodedPair, EncodedSplit, join_ids, record_batch

FIELDS = ("prompt_ids", "chosen_ids", "rejected_ids")


def as_tuple(p: EncodedPair) -> tuple:
    return (*(list(map(int, getattr(p, f))) for f in FIELDS), p.subset_id, p.margin, p.index)


def chunked(pairs: list[EncodedPair], sizes: list[int]) -> EncodedSplit:
    """A split written as several record batches (the way an encoder or a cache writes one)."""
    batches, start = [], 0
    for n in sizes:
        batches.append(record_batch(pairs[start : start + n]))
        start += n
    return EncodedSplit.from_batches(batches)


@pytest.fixture
def pairs():
    out = random_pairs(50, 40, seed=3)
    out[5] = EncodedPair([], [7], [8, 9], 1, 0.25, 5)  # an empty prompt
    return out


def test_pairs_read_back_as_written_from_one_or_many_batches(pairs):
    for split in (EncodedSplit.from_pairs(pairs), chunked(pairs, [7, 0, 13, 20])):
        assert split.table.schema.equals(SCHEMA) and len(split) == len(pairs)
        assert [as_tuple(p) for p in split] == [as_tuple(p) for p in pairs]
        assert as_tuple(split[-1]) == as_tuple(pairs[-1]) and [as_tuple(p) for p in split[3:9:2]] == [
            as_tuple(p) for p in pairs[3:9:2]
        ]
        want = np.array([[len(getattr(p, f)) for f in FIELDS] for p in pairs]).T
        assert all((a == b).all() for a, b in zip(split.lengths(), want, strict=True))
        with pytest.raises(IndexError):
            split[len(pairs)]


def test_from_table_round_trips_in_memory_and_through_a_memory_mapped_ipc_file(pairs, tmp_path):
    split = chunked(pairs, [10, 30])
    again = EncodedSplit.from_table(split.table)
    assert [as_tuple(p) for p in again] == [as_tuple(p) for p in pairs]
    path = tmp_path / "train.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_table(split.table)
    before = pa.total_allocated_bytes()
    with pa.memory_map(str(path), "r") as source:
        mapped = EncodedSplit.from_table(pa.ipc.open_file(source).read_all())
        assert [as_tuple(p) for p in mapped] == [as_tuple(p) for p in pairs]
        assert pa.total_allocated_bytes() - before < 4096  # ids are read from the mapped pages, not copied
        # A slice of a mapped table (offsets that do not start at 0) reads the right pairs too.
        sliced = EncodedSplit.from_table(mapped.table.slice(12, 20))
        assert [as_tuple(p) for p in sliced] == [as_tuple(p) for p in pairs[12:32]]


def test_a_table_of_another_shape_is_refused(pairs):
    table = EncodedSplit.from_pairs(pairs).table
    with pytest.raises(DataError, match="margin"):
        EncodedSplit.from_table(table.set_column(4, "margin", table.column("margin").cast(pa.float32())))
    nulls = pa.array([None] * len(pairs), type=pa.int32())
    with pytest.raises(DataError, match="subset_id"):
        EncodedSplit.from_table(table.set_column(3, SCHEMA.field("subset_id"), nulls))


def test_join_ids_concatenates_lists_and_arrays():
    a = np.array([5, 6], dtype=np.int32)
    assert join_ids(a, [7], np.zeros(0, dtype=np.int32), []).tolist() == [5, 6, 7]
    assert (a + a).tolist() == [10, 12]  # why `+` must not join ids
