"""Folders that prove themselves: a marker written last lists every other file's size and CRC-32, so a reader can
tell a whole folder from one cut short or damaged on disk. The tokenized-data cache's entries (rm/tokens/cache.py)
and a run's checkpoints (rm/config/rundir.py) are both sealed this way, by these functions.

A run directory's manifest records the other files a run writes the same way (`record_of`), and train.overwrite
checks a file against its record or its checkpoint's marker (`as_recorded`) before it deletes it."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

MARKER = "complete.json"
SMALL = 16 << 20
"""Files up to 16 MiB (a model card, a config, a tokenizer.json) are checked by CRC-32 as well as size when
train.overwrite asks whether rm wrote them (about 16 ms each at ~1 GB/s); larger ones (weights, optimizer state)
by size alone, so that deciding what to delete never reads gigabytes."""


def file_crc(path: Path) -> int:
    """CRC-32 of a file, read in 8 MiB chunks (about 1 GB/s: a second for a 1B-parameter bf16 checkpoint)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 23):
            crc = zlib.crc32(chunk, crc)
    return crc


def listed_files(folder: Path) -> dict[str, list[int]]:
    """[size, CRC-32] of every file in `folder` but its marker, by path relative to it: what the marker holds."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != MARKER)
    return {str(p.relative_to(folder)): [p.stat().st_size, file_crc(p)] for p in files}


def seal_problem(folder: Path, no_marker: str) -> str | None:
    """Why `folder` must not be trusted (`no_marker` when it has none; a file missing, of another size or checksum),
    or None when every file is as its marker says."""
    folder = Path(folder)
    try:
        expected = json.loads((folder / MARKER).read_text())["files"]
    except FileNotFoundError:
        return no_marker
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable {MARKER} ({type(e).__name__})"
    for name, (size, crc) in expected.items():
        file = folder / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, {size} were written"
        if file_crc(file) != crc:
            return f"{name} does not match its checksum (damaged on disk or edited)"
    return None


def record_of(path: Path) -> list[int | None]:
    """[size, CRC-32] of a file rm has just written, the CRC-32 left out (None) above `SMALL`: what a run
    directory's manifest keeps, to prove later that the file is still as rm wrote it."""
    size = path.stat().st_size
    return [size, file_crc(path) if size <= SMALL else None]


def as_recorded(path: Path, record: int | list) -> bool:
    """Whether file `path` is as `record` says rm wrote it: its size ([size, CRC-32], or a size alone as an rm
    before CRCs recorded it), and its CRC-32 where there is one and the file is no larger than `SMALL`."""
    if isinstance(record, int):
        size, crc = record, None
    elif isinstance(record, list) and 1 <= len(record) <= 2 and all(isinstance(n, int | None) for n in record):
        size, crc = record[0], record[1] if len(record) == 2 else None
    else:
        return False  # a record no rm wrote: nothing proves the file
    try:
        if path.stat().st_size != size:
            return False
        return crc is None or size > SMALL or file_crc(path) == crc
    except OSError:
        return False
