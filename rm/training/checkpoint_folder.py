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


TORCH_WRITER_FAILURES = ("PytorchStreamWriter failed", "unexpected pos", "iostream error")
"""What torch.save's zip writer raises (a RuntimeError, no errno) when a write comes up short: on a 400-600 KiB
tmpfs filling during a checkpoint, `optimizer.bin` failed with "unexpected pos 41792 vs 41680" at 4 of 10 sizes."""

FULL_BELOW = 2**20
"""Free bytes under which a short write is put down to a full disk: a write that fails for lack of space has filled
the file system to within a block (a few KiB); a writer error with more free than this is some other fault."""


def torch_writer_failed(error: BaseException) -> bool:
    return isinstance(error, RuntimeError) and any(words in str(error) for words in TORCH_WRITER_FAILURES)


def disk_is_full(path: Path) -> bool:
    """Whether the file system holding `path` has (almost) no space left for this user."""
    try:
        return shutil.disk_usage(path).free < FULL_BELOW
    except OSError:
        return False


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
        full = full or "No space left" in str(error)  # safetensors says it inside its own errors
        full = full or (torch_writer_failed(error) and disk_is_full(self.partial))  # before the space comes back
        if self.is_main:
            shutil.rmtree(self.partial, ignore_errors=True)
        if full:
            raise no_space(self.partial.parent, error) from None
        return False
