"""Tokenized data on disk, keyed by everything that changes it, so a second run skips reading, parsing and
tokenizing.

An entry is a folder `<cache_dir>/<kind>-<key>`: what it holds is `rm/tokens/entry.py`'s business (encoded
splits as memory-mapped Arrow files and JSON) or a tokenizer folder (`rm/tokens/prepare.py`); this module only
keys, writes and finds folders. It is written as `<kind>-<key>.tmp-<pid>-<random>`, closed with a marker file
holding the size and CRC-32 of every other file, and renamed into place in one `os.rename`: a reader sees a
whole entry or none. A reader checks the marker against the files and treats a mismatch (a process killed
while copying, a truncated or edited file) as a miss: the entry is moved aside and rebuilt. Of two processes
building one key at once, the first rename wins; the other discards its copy and reads the winner's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rm.config import DataConfig
from rm.config.atomic import write_text
from rm.config.sealed import MARKER, listed_files, seal_problem

log = logging.getLogger("rm")

VERSION = 5
"""Bumped whenever what an entry holds or how rm encodes changes: old entries are then never read (2: groups;
3: K-response groups' scores, explicit pairs and prompt ids; 4: the data report's count of eval prompts also
trained on, which an entry's stored report would lack; 5: every label the data has, whatever the loss or head,
and each group's origin)."""
STALE_TMP_S = 3600
"""A temporary folder older than this belongs to a process that died: removed by the next build."""
NOT_RESULT_FIELDS = ("cache", "cache_dir", "num_proc", "synthetic")
"""DataConfig fields that do not change the data (synthetic is keyed only for the synthetic source)."""


def cache_root(cfg: DataConfig) -> Path:
    """`data.cache_dir`, else `$HF_DATASETS_CACHE/rm-tokenized`, else `~/.cache/huggingface/datasets/rm-tokenized`."""
    if cfg.cache_dir:
        return Path(cfg.cache_dir).expanduser()
    base = os.environ.get("HF_DATASETS_CACHE")
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "huggingface" / "datasets") / "rm-tokenized"


def digest(*parts: Any) -> str:
    """A short, stable hash of JSON-able parts (dict keys sorted)."""
    text = json.dumps([VERSION, *parts], sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def source_state(cfg: DataConfig) -> list:
    """What identifies the source's content: each local file's path, size and mtime_ns; the generator's
    settings for `synthetic` (written afresh into each run directory); the name for a Hub set."""
    if cfg.source == "synthetic":
        return ["synthetic", asdict(cfg.synthetic)]
    path = Path(cfg.source).expanduser()
    if not path.exists():  # a Hub dataset: its name, splits and subsets are in the DataConfig part of the key
        return ["hub", cfg.source]
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [str(path.resolve())] + [[str(f.relative_to(path)), *stat(f)] for f in files]


def stat(file: Path) -> tuple[int, int]:
    s = file.stat()
    return s.st_size, s.st_mtime_ns


def data_state(cfg: DataConfig) -> dict:
    """Every input of loading and encoding: the source and each DataConfig field that changes the pairs or their ids
    (data.eos among them; left out under none, so entries written before the key existed stay found)."""
    fields = {k: v for k, v in asdict(cfg).items() if k not in NOT_RESULT_FIELDS}
    if fields.get("eos") == "none":
        del fields["eos"]
    return {"source": source_state(cfg), "data": fields}


def tokenizer_state(tokenizer: Any) -> list | None:
    """The tokenizer's serialized state: its vocabulary, merges, normalizer, pre- and post-processor (the
    fast tokenizer's JSON), special tokens and chat template."""
    if tokenizer is None:
        return None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else sorted(tokenizer.get_vocab().items())
    specials = {k: str(v) for k, v in getattr(tokenizer, "special_tokens_map", {}).items()}
    return [type(tokenizer).__name__, body, specials, getattr(tokenizer, "chat_template", None)]


# ---- entries: written whole or not at all ----


def problem(entry: Path) -> str | None:
    """Why `entry` must not be read (no marker, a file missing, of another size or checksum), or None."""
    return seal_problem(entry, "no completion marker")


def discard(entry: Path) -> None:
    """Move the folder aside (one rename, so no reader sees it half deleted), then delete it."""
    aside = entry.with_name(f"{entry.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        entry.rename(aside)
    except OSError:
        return  # already gone: another process discarded or replaced it
    shutil.rmtree(aside, ignore_errors=True)


def find(root: Path, name: str) -> Path | None:
    """The complete entry `root/name`, or None; a damaged one is discarded with a warning saying why."""
    entry = root / name
    if not entry.is_dir():
        return None
    why = problem(entry)
    if why is None:
        return entry
    log.warning("data: cache %s unusable (%s): rebuilding it", entry, why)
    discard(entry)
    return None


def unusable(entry: Path, error: Exception) -> None:
    """An entry that passed its checks but failed to load (written by an incompatible rm): rebuilt."""
    log.warning("data: cache %s unusable (%s: %s): rebuilding it", entry, type(error).__name__, error)
    discard(entry)


def new_entry(root: Path, name: str) -> Path:
    """A fresh temporary folder for entry `name` (readers never look at it); stale ones are cleaned first."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("*.tmp-*"):
        try:
            if time.time() - old.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass  # another process removed it first
    tmp = root / f"{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    return tmp


@contextmanager
def building(root: Path, name: str) -> Iterator[Path]:
    """`new_entry`'s folder for the block to fill; if the block fails (a full disk), the folder goes at once
    rather than holding its space until a later build finds it stale (`STALE_TMP_S`)."""
    tmp = new_entry(root, name)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish(tmp: Path, name: str) -> Path:
    """Mark `tmp` complete and rename it to `name`; if another process got there first, use its entry. If
    neither works (a full disk for the marker), `tmp` is removed at once."""
    try:
        return _publish(tmp, name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _publish(tmp: Path, name: str) -> Path:
    files = listed_files(tmp)
    write_text(tmp / MARKER, json.dumps({"version": VERSION, "files": files}, indent=1))
    final = tmp.parent / name
    for _ in range(2):
        try:
            tmp.rename(final)  # atomic; fails on a non-empty folder already there
            return final
        except OSError:
            if find(tmp.parent, name) is not None:  # the winner's entry is whole: ours is not needed
                shutil.rmtree(tmp, ignore_errors=True)
                return final
    raise OSError(f"cannot rename {tmp} to {final}")
