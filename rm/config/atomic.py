"""Every file rm writes goes through here: written aside, flushed to disk, renamed into place.

A full disk or a kill in the middle of a write then leaves the old file or none, never a 0-byte `eval.json`
that a later `rm export` fails to parse. A write that fails for lack of space ends in one line naming the
path and the space left, not an `OSError` traceback from deep inside json or safetensors.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rm.errors import RMError


class DiskFull(RMError, OSError):
    """No space left where rm was writing: the message names the path and the free space."""


def free_space(path: Path) -> str:
    """The free space of the file system holding `path` (or its nearest existing parent), readably."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return "unknown"
    return f"{free / 2**20:.1f} MiB" if free < 2**30 else f"{free / 2**30:.1f} GiB"


def no_space(path: Path, error: OSError) -> DiskFull:
    return DiskFull(f"{path}: no space left on the device ({free_space(path)} free); free some and run again")


def is_no_space(error: BaseException) -> bool:
    """Whether `error` is a full disk: ENOSPC, or the same reported by a library in words (torch's writer)."""
    if isinstance(error, DiskFull):
        return False  # already says so
    return getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error)


@contextmanager
def disk_full_explained(where: str | Path) -> Iterator[None]:
    """A full disk in the block (a checkpoint, a log row, the export) raises `DiskFull` naming the file (or
    `where`) and the space left, not a traceback from deep inside torch or safetensors."""
    try:
        yield
    except Exception as e:
        if not is_no_space(e):
            raise
        raise no_space(Path(getattr(e, "filename", None) or where), e) from None


def write_bytes(path: str | Path, data: bytes) -> None:
    """`path` holds `data` whole, or keeps what it held: temp file beside it, fsync, rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno == errno.ENOSPC:
            raise no_space(path, e) from None
        raise


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())
