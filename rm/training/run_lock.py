"""One run at a time in an output_dir: an exclusive lock, held by the main process for the run's life.

Two processes on one run directory corrupted each other: a second `train.resume=auto` pruned the first's
checkpoint from under it (and `prune()` takes every `.partial-*` folder it sees), a second `overwrite=true`
truncated the first's `train_log.jsonl`. Now the second stops at once, before it looks at anything there, with
one line naming the holder.

The lock is `<output_dir>/.rm.lock`, holding the holder's pid and host, and an `flock` on it for as long as the
run goes: the kernel drops an flock when its process dies, however it dies, so a lock left by a killed run is
taken over at once on its host. On another host (a shared file system whose flock does not reach across) the
file's pid cannot be checked, so it is refused naming host and pid. Only the main process of a launch takes
it; the others learn its answer from it, so every process of the launch stops, or none. The file goes when the
run ends, cleanly or not, and so do the folders made for it, so a refused or failed start leaves nothing.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from accelerate import Accelerator
from accelerate.utils import broadcast_object_list

from rm.errors import ConfigError

LOCK = ".rm.lock"


class Locked(ConfigError):
    """The run directory is another live run's."""


class RunLock:
    """An exclusive lock on one run directory, for this process; `release` removes its file."""

    def __init__(self, output_dir: str | Path):
        self.root = Path(output_dir)
        self.path = self.root / LOCK
        self.fd: int | None = None
        self.made: list[Path] = []

    def acquire(self) -> RunLock:
        """Take the lock or raise `Locked` naming who holds it; makes output_dir if it does not exist yet."""
        self.made = [p for p in (self.root, *self.root.parents) if not p.exists()]
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError:
            self.made = []
            return self  # not a folder one can write in: check_output_dir says so in its terms
        for _ in range(10):  # retried only when a holder removed the file between our open and our flock
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                holder = _read(fd)
                os.close(fd)
                self._clean_made()
                raise Locked(self._held_by(holder)) from None
            if not _same_file(fd, self.path):  # unlinked by its holder's release: lock the new one
                os.close(fd)
                continue
            holder = _read(fd)
            if holder and holder.get("host") != socket.gethostname():  # an flock that may not reach that host
                os.close(fd)
                self._clean_made()
                raise Locked(self._held_by(holder, stale_hint=True))
            me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode() + b"\n", 0)
            self.fd = fd
            return self
        raise Locked(f"output_dir={self.root}: could not take its lock {self.path} (it keeps changing hands)")

    def release(self) -> None:
        """Remove the lock file and the folders made for it (where nothing else was written in them)."""
        if self.fd is not None:
            if _same_file(self.fd, self.path):
                self.path.unlink(missing_ok=True)  # while still locked: no one can take a file about to go
            os.close(self.fd)
            self.fd = None
        self._clean_made()

    def _clean_made(self) -> None:
        for folder in self.made:  # deepest first; one that holds anything is kept, and its parents
            try:
                folder.rmdir()
            except OSError:
                break
        self.made = []

    def _held_by(self, holder: dict, stale_hint: bool = False) -> str:
        who = f"process {holder.get('pid', '?')} on {holder.get('host', '?')}" if holder else "another process"
        since = f" since {holder['since']}" if holder.get("since") else ""
        hint = f" (if that process is gone, delete {self.path})" if stale_hint else ""
        return (
            f"output_dir={self.root} is in use by {who}{since}{hint}: one run at a time in a run directory; wait "
            "for it to end or choose another output_dir"
        )


def _read(fd: int) -> dict:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


@contextmanager
def run_dir_lock(output_dir: str | Path, accelerator: Accelerator) -> Iterator[None]:
    """The run directory locked for the block by the launch's main process; every process of the launch
    raises `Locked` if it is another's."""
    lock, refused = RunLock(output_dir), None
    if accelerator.is_main_process:
        try:
            lock.acquire()
        except Locked as e:
            refused = str(e)
    if accelerator.num_processes > 1:
        refused = broadcast_object_list([refused])[0]  # the main process's answer, on every process
    if refused is not None:
        raise Locked(refused)
    try:
        yield
    finally:
        lock.release()
