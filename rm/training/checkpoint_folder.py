"""Writing a checkpoint folder so that a kill or a full disk at any instant leaves a whole checkpoint.

The files are flushed to disk, then `complete.json` (their sizes and CRC-32s, rm/config/rundir.py) is written
last, then the folder is renamed into place: a `step-N` without a marker was cut short and is never trusted.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from rm.config.atomic import DiskFull, no_space, write_text
from rm.config.rundir import MARKER, PARTIAL, checkpoint_files


def seal(partial: Path, step: int) -> None:
    """Flush every file of `partial` to disk, then write its completion marker: from now on it is whole."""
    for f in partial.rglob("*"):
        if f.is_file():
            fsync(f)
    marker = {"step": step, "files": checkpoint_files(partial)}
    write_text(partial / MARKER, json.dumps(marker, indent=1) + "\n")


def move_in(partial: Path, final: Path) -> None:
    """Rename `partial` to `final`. An old `final` (the same step saved again by a run resumed from an earlier
    checkpoint) is renamed aside first and deleted after, never emptied file by file in place, so a kill at any
    instant leaves one of them whole (an aside left behind is a `.partial-…` folder, which the next save clears)."""
    aside = final.with_name(f"{PARTIAL}{final.name}.replaced")
    if final.exists():
        shutil.rmtree(aside, ignore_errors=True)
        final.rename(aside)
    partial.rename(final)
    fsync(final.parent)
    shutil.rmtree(aside, ignore_errors=True)


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class space_kept:  # noqa: N801 (used as a `with` block, as contextlib's are)
    """A checkpoint that cannot be written for lack of space: its partial folder removed (the space back, the
    last whole checkpoint untouched) and one line naming the path and the free space (`DiskFull`)."""

    def __init__(self, partial: Path, is_main: bool):
        self.partial, self.is_main = partial, is_main

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if error is None or not isinstance(error, OSError | RuntimeError):
            return False
        full = isinstance(error, DiskFull) or getattr(error, "errno", None) == errno.ENOSPC
        full = full or "No space left" in str(error)  # torch.save and safetensors say it inside their own errors
        if self.is_main:
            shutil.rmtree(self.partial, ignore_errors=True)
        if full:
            raise no_space(self.partial.parent, error) from None
        return False
