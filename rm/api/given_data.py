"""Data handed over in memory (a `datasets.Dataset`, a list of records) written out as the JSON-lines files rm reads.

rm reads data from files, folders and Hub names (rm/data/load.py). Writing in-memory data to a file gives it
everything file data has, with nothing new to keep in step: the tokenized-data cache keys on it, data_report.json
and skipped.jsonl name its lines (`train.jsonl:12`), a format is detected as for a file, and a resumed run reads
the same file again.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rm.config.atomic import write_text
from rm.errors import ConfigError

Data = str | Path | Sequence[dict] | Any
"""A path (file, folder or Hub name), a `datasets.Dataset`, or a list of records (dicts)."""


def is_path(data: Data) -> bool:
    return isinstance(data, str | Path)


def records_of(data: Data, what: str) -> list[dict]:
    """The records of a `datasets.Dataset` (duck-typed: `column_names` and `to_list`, so `datasets` is not imported
    here) or of a list or tuple of dicts; anything else, or a record that is not a dict, is refused naming it."""
    if hasattr(data, "column_names") and hasattr(data, "to_list"):
        rows = data.to_list()
    elif isinstance(data, list | tuple):
        rows = list(data)
    elif hasattr(data, "keys") and hasattr(data, "values") and all(hasattr(v, "to_list") for v in data.values()):
        names = ", ".join(map(str, data.keys()))
        raise ConfigError(f"{what}: a DatasetDict (splits {names}): pass one split, e.g. data[{next(iter(data))!r}]")
    else:
        got = type(data).__name__
        raise ConfigError(f"{what}: expected a path, a datasets.Dataset or a list of records (dicts), got a {got}")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise ConfigError(f"{what}[{bad}]: a record must be a dict of fields, got a {type(rows[bad]).__name__}")
    if not rows:
        raise ConfigError(f"{what}: no records")
    return rows


def jsonl_text(rows: list[dict], what: str) -> str:
    """`rows` as JSON lines, line i + 1 holding record i: made before the run starts, so that a value JSON cannot
    hold (a set, NaN) is refused naming its record before anything is written."""
    lines = []
    for i, row in enumerate(rows):
        try:
            lines.append(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"{what}[{i}]: not a JSON record ({e}): give fields as str, numbers, lists, dicts"
            ) from None
    return "".join(lines)


def local_file(source: str | Path, what: str) -> Path:
    """A local data file that can be copied beside in-memory data; a folder or a Hub name has splits of its own
    and cannot: refused naming the config keys to use instead."""
    path = Path(source).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"{what}={source}: with both train_data and eval_data, each must be a file or records (a folder or Hub "
            "name has its own splits: give it as train_data alone, with data.train_split and data.eval_split)"
        )
    return path


def place(content: str | Path, folder: Path, split: str) -> Path:
    """JSON lines (`jsonl_text`), or a copy of a file, written into `folder` as `<split>.jsonl` or `<split><the
    file's suffixes>` (`test.csv.gz`): a copied file keeps its format and its line numbers."""
    if isinstance(content, Path):
        suffixes = content.suffixes[-2:] if content.suffix == ".gz" else content.suffixes[-1:]
        target = folder / (split + "".join(suffixes))
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(content, target)
        return target
    target = folder / f"{split}.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    write_text(target, content)
    return target
