"""What a tokenized-data cache entry holds: everything a run takes from its data, so a cached run reads no
source text at all.

`<entry>/train.arrow`, `<entry>/eval.arrow`: the encoded splits (rm/tokens/store.py), memory-mapped on reading.
`<entry>/meta.json`: the subset names, the pairs counted per subset as loaded, and the `DataReport`
(data_report.json and skipped.jsonl come out byte for byte as from the source; its "encoding" note is what
fitting did, read back as typed `EncodeReport`s).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from rm.data.data_report import BadRecord, DataReport
from rm.tokens.encode import EncodeReport, Encoding
from rm.tokens.store import EncodedGroup, EncodedSplit, split_to_table

SPLITS = ("train", "eval")
HERE = "<rm: this run's generated data>"
"""Stands for `<output_dir>/data` in a synthetic entry's report (the file:line origins of dropped pairs), so
one entry serves every run directory with the same generator settings (a sweep's trials)."""


@dataclass
class Prepared:
    """What a run takes from its data."""

    tokenizer: PreTrainedTokenizerBase
    encoding: Encoding
    """Both encoded splits and what fitting them into `collator.max_length` did."""
    subsets: list[str]
    report: DataReport
    """What loading and encoding skipped, repaired and changed (the run writes it out)."""
    loaded: dict[str, dict[str, int]]
    """Pairs per subset of each split as loaded, before encoding dropped any: {"train": {...}, "eval": {...}}."""

    def kept(self, split: str) -> dict[str, int]:
        """Pairs per subset of `split` as encoded, after fitting dropped those that cannot fit: what the run trains
        or evaluates on (the quickstart at max_length=8 said "9000 train pairs" and trained on 6,548)."""
        counts = np.bincount(getattr(self, split).table.column("subset_id").to_numpy(), minlength=len(self.subsets))
        return {name: int(n) for name, n in zip(self.subsets, counts, strict=True) if name in self.loaded[split]}

    @property
    def train(self) -> EncodedSplit:
        return self.encoding.train

    @property
    def eval(self) -> EncodedSplit:
        return self.encoding.eval


def write_entry(data: Prepared, folder: Path, here: str | None = None) -> None:
    for split in SPLITS:
        write_split(getattr(data, split), folder / f"{split}.arrow")
    meta = json.dumps({"subsets": data.subsets, "loaded": data.loaded, "report": asdict(data.report)})
    (folder / "meta.json").write_text(meta.replace(here, HERE) if here else meta)


def read_entry(folder: Path, tokenizer: PreTrainedTokenizerBase, here: str | None = None) -> Prepared:
    meta = (folder / "meta.json").read_text()
    meta = json.loads(meta.replace(HERE, here) if here else meta)
    report = meta["report"]
    report["skipped"] = [BadRecord(**b) for b in report["skipped"]]
    report["repaired"] = [BadRecord(**b) for b in report["repaired"]]
    note = report["notes"]["encoding"]
    reports = {split: EncodeReport.from_note(note[split]) for split in SPLITS}
    encoding = Encoding(*read_splits(folder), note["max_length"], reports)
    return Prepared(tokenizer, encoding, meta["subsets"], DataReport(**report), meta["loaded"])


def read_splits(folder: Path) -> tuple[EncodedSplit, EncodedSplit]:
    """An entry's (train, eval) splits, memory-mapped."""
    return read_split(folder / "train.arrow"), read_split(folder / "eval.arrow")


def write_split(split: Sequence[EncodedGroup], path: Path) -> None:
    """In the Arrow stream format `datasets` uses, so `datasets.Dataset.from_file(path)` opens it too."""
    table = split_to_table(split)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def read_split(path: Path) -> EncodedSplit:
    """Memory-mapped: the table's buffers are pages of the file (shared by every process that maps it)."""
    return EncodedSplit(pa.ipc.open_stream(pa.memory_map(str(path))).read_all())  # columns checked there
