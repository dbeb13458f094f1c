"""`encode_splits` over several forked processes (`data.num_proc`), each on a contiguous share of both splits.

The same groups, indices and report as one process. On 2 cores it does not pay: the fast tokenizer's batch
call already runs on both, and 2 processes took 12.9 and 9.0 s where one took 10.3 and 8.2 s for 20,000 HH
pairs (issue 12).
"""

from __future__ import annotations

import multiprocessing

import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from rm.data.data_report import DataReport
from rm.data.load import LoadedData
from rm.tokens.encode import EncodeReport, Encoding, encode_splits
from rm.tokens.store import EncodedSplit, split_to_table


def _encode_share(job: tuple) -> tuple[pa.Table, pa.Table, EncodeReport, EncodeReport]:
    train, held, tokenizer, max_length, subsets = job
    done = encode_splits(LoadedData(train, held, DataReport()), tokenizer, max_length, subsets)
    return split_to_table(done.train), split_to_table(done.eval), done.reports["train"], done.reports["eval"]


def _renumbered(tables: list[pa.Table]) -> EncodedSplit:
    """The shares' tables as one split, each group's `index` its position in the whole."""
    table = pa.concat_tables([t for t in tables if t.num_rows] or tables[:1])  # an empty share: no attributes
    index = pa.array(range(table.num_rows), pa.int64())
    return EncodedSplit(table.set_column(table.schema.get_field_index("index"), "index", index))


def encode_in_processes(
    loaded: LoadedData, tokenizer: PreTrainedTokenizerBase, max_length: int, subsets: list[str], n: int
) -> Encoding:
    def share(pairs: list, i: int) -> list:
        return pairs[len(pairs) * i // n : len(pairs) * (i + 1) // n]

    jobs = [(share(loaded.train, i), share(loaded.eval, i), tokenizer, max_length, subsets) for i in range(n)]
    with multiprocessing.get_context("fork").Pool(n) as pool:
        shares = pool.map(_encode_share, jobs)
    reports = {split: EncodeReport.merged([s[2 + k] for s in shares]) for k, split in enumerate(("train", "eval"))}
    return Encoding(_renumbered([s[0] for s in shares]), _renumbered([s[1] for s in shares]), max_length, reports)
