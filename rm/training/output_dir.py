"""Whose output_dir it is: what a run may do there, decided before anything is written, and when it claims it.

A folder becomes a run's only when training starts (after the data and the model loaded): `claim_output_dir`
writes the manifest (`rm_run.json`) and config.yaml then. Until that moment `unclaimed` takes back whatever the
start wrote (synthetic data, the run's tokenizer, the data report), so a run that fails on its data, its model
or a Ctrl-C while tokenizing leaves no file behind and the fixed command is not refused.

`train.overwrite` deletes only what rm can prove it wrote, file by file (rm/training/ownership.py): what the
manifest recorded as the run wrote it (sizes and CRC-32s, or the names of growing logs) and what a checkpoint's
marker lists. A run directory of an rm that wrote no manifest (or one of names only) is rm's only if its
config.yaml loads as a run config. Any other file under rm's names there (a backup in checkpoints/, notes in
export/, one's own TensorBoard run under rm/), or one of rm's that changed since, stops the run in one line
naming them before a file is touched.

The layout itself (which files say a folder holds a run, which a run writes) is `rm.config.rundir.RunDir`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from rm.config import RunConfig
from rm.config.atomic import write_text
from rm.config.rundir import (
    CHECKPOINTS,
    CONFIG,
    MANIFEST,
    MANIFEST_VERSION,
    TRACKING,
    RunDir,
    read_manifest,
    write_config,
)
from rm.config.sealed import record_of
from rm.errors import ConfigError, ExportError, RMError
from rm.export.hub import push_folder
from rm.training.ownership import proof, refusal, run_config


class Start(Enum):
    """What a run does with its output_dir, as `check_output_dir` decides."""

    FRESH = "fresh"
    """Nothing of a run there: start."""
    CLEAR = "clear"
    """Delete the earlier run's files first (train.overwrite, or train.resume=auto of a run without a checkpoint)."""
    RESUME = "resume"
    """Continue the unfinished run there (train.resume)."""
    FINISHED = "finished"
    """train.resume=auto of a run that has finished: nothing to do, nothing touched."""


def check_output_dir(cfg: RunConfig) -> Start:
    """What this run may do in its output_dir; refuse (ConfigError) what would mix two runs or write over files
    rm did not write. Called by every process before anything is written there.

    Every refusal names only commands that work from here: a finished run is replaced or left alone (its
    train.resume says there is nothing to resume), an unfinished one continued or replaced.
    """
    out, t = RunDir(cfg.output_dir), cfg.train
    if t.resume and t.overwrite:
        raise ConfigError(
            f"train.resume={t.resume} and train.overwrite=true contradict each other (resume continues the run in "
            "output_dir, overwrite deletes it first): pass one of them"
        )
    if out.root.exists() and not out.root.is_dir():
        raise ConfigError(f"output_dir={out.root}: is a file, not a directory: choose another output_dir")
    present = [path.name for path in out.written if path.exists()]
    if not present:
        return Start.FRESH
    if not owned(out):
        raise ConfigError(
            f"output_dir={out.root} holds {', '.join(present)}, which no rm run claimed (no {MANIFEST}): rm does not "
            "write over files it did not write; move them or choose another output_dir"
        )
    finished, checkpoints = out.finished_step(), out.complete_checkpoints()
    present = [path.name for path in out.run_files if path.exists()] or present  # the files that say what it is
    if t.resume:
        if finished is not None and t.resume == "auto":
            return Start.FINISHED  # a checkpoint named by its path is run again from there: the user asked for it
        start = Start.CLEAR if t.resume == "auto" and not checkpoints else Start.RESUME
    elif t.overwrite:
        start = Start.CLEAR
    elif finished is not None:
        raise ConfigError(
            f"output_dir={out.root} already holds a run that finished at step {finished} ({', '.join(present)}): "
            "use another output_dir, or replace it with train.overwrite=true"
        )
    elif checkpoints:
        raise ConfigError(
            f"output_dir={out.root} already holds an unfinished run (newest checkpoint: {checkpoints[-1][1].name}): "
            "continue it with train.resume=auto, replace it with train.overwrite=true, or use another output_dir"
        )
    else:
        raise ConfigError(
            f"output_dir={out.root} already holds a run that stopped before its first checkpoint "
            f"({', '.join(present)}): start it again with train.resume=auto or train.overwrite=true, or use another "
            "output_dir"
        )
    if start is Start.CLEAR and (unproven := proof(out).unproven):
        raise refusal(out, unproven)
    return start


def owned(out: RunDir) -> bool:
    """Whether rm's run files here are a run's: its manifest, or (a run of an rm that wrote none) a config.yaml
    that loads as a run config with a log, an eval.json or checkpoints beside it."""
    if read_manifest(out.root) is not None:
        return True
    evidence = any(p.exists() for p in (out.eval_json, out.train_log, out.checkpoints))
    return evidence and run_config(out) is not None


@contextmanager
def unclaimed(cfg: RunConfig, start: Start, is_main: bool) -> Iterator[set[str]]:
    """From the start of a run to its claim: clear the earlier run's files (`Start.CLEAR`: only what `proof`
    says rm wrote), create output_dir, check it can be written; if anything in the block fails (a data error,
    an unreachable model, Ctrl-C or SIGTERM while tokenizing), remove what the block wrote there, and output_dir
    itself if it made it.

    Yields the files under rm's names there that are the run's (paths relative to output_dir, for
    `claim_output_dir`): those `proof` says an earlier claim of the run wrote, and, when the block ends, those it
    wrote or rewrote. Only the main process writes; the others pass through.
    """
    out, ours = RunDir(cfg.output_dir), set()
    if not is_main:
        yield ours
        return
    made = [p for p in (out.root, *out.root.parents) if not p.exists()]  # the folders mkdir will create
    try:
        found = proof(out) if out.root.is_dir() else None
        if found and start is Start.CLEAR:
            for path in found.removable:
                _remove(path)
        elif found:
            ours.update(found.mine)
        out.root.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out.root).close()  # writable: found now, not after minutes of tokenizing
    except OSError as e:
        raise _cannot_write(out, e) from None
    before, stats = {path for path in out.written if path.exists()}, _stats(out)
    try:
        yield ours
    except BaseException:
        for path in out.written:
            if path not in before and path.exists():
                _remove(path, ignore_errors=True)
        for folder in made:  # deepest first; a folder that holds anything else is kept
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    ours.update(rel for rel, stat in _stats(out).items() if stats.get(rel) != stat)


def _stats(out: RunDir) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under rm's names: what the start writes shows as new or changed."""
    files = [f for p in out.written if p.exists() for f in (p.rglob("*") if p.is_dir() else [p]) if f.is_file()]
    return {f.relative_to(out.root).as_posix(): (f.stat().st_size, f.stat().st_mtime_ns) for f in files}


def claim_output_dir(cfg: RunConfig, ours: set[str] = frozenset()) -> None:
    """Make output_dir this run's (main process, when training starts): its config.yaml, then its manifest,
    which records the files of `ours` (what the start wrote, and what an earlier claim of the run wrote):
    [size, CRC-32] of each, or by name the logs and TensorBoard's files that keep growing. Checkpoints are
    proved by their own markers; what the run writes later (its export, eval.json, TensorBoard's events) is
    recorded as it is written (rm.config.rundir.record_written). What train.overwrite may delete here."""
    out = RunDir(cfg.output_dir)
    try:
        write_config(cfg, out.config)
        files, grown = {}, {out.train_log.name, out.suites_log.name}
        for rel in sorted(ours):
            top, path = rel.partition("/")[0], out.root / rel
            if rel in (CONFIG, MANIFEST) or top in (CHECKPOINTS, out.export_partial.name) or not path.is_file():
                continue  # known by name, or by a checkpoint's marker
            if top == TRACKING or rel in grown:
                grown.add(rel)
            else:
                files[rel] = record_of(path)
        manifest = {"version": MANIFEST_VERSION, "claimed": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid()}
        manifest |= {"host": socket.gethostname(), "files": files, "grown": sorted(grown)}
        write_text(out.manifest, json.dumps(manifest, indent=1) + "\n")
    except OSError as e:
        raise _cannot_write(out, e) from None


def _remove(path: Path, ignore_errors: bool = False) -> None:
    """One of rm's run files or folders (`RunDir.written`), gone."""
    if path.is_dir() and not path.is_symlink():  # a link to one's own folder: the link goes, not what it holds
        shutil.rmtree(path, ignore_errors=ignore_errors)
    else:
        path.unlink(missing_ok=True)


def _cannot_write(out: RunDir, e: OSError) -> ConfigError:
    if isinstance(e, RMError):  # a full disk (rm.config.atomic.DiskFull) says so itself
        return e
    return ConfigError(f"output_dir={out.root}: cannot write there ({e.strerror or e}): choose another output_dir")


def finished_result(cfg: RunConfig, is_main: bool) -> dict:
    """The eval.json of a finished run that train.resume asked to continue, marked `already_finished`; the
    main process says so."""
    out = RunDir(cfg.output_dir)
    step = out.finished_step()
    if is_main:
        print(f"{out.root} already finished at step {step}; nothing to resume")
    try:
        result = json.loads(out.eval_json.read_text())
    except ValueError:
        result = {}
    return result | {"already_finished": True}


def push_export(cfg: RunConfig) -> None:
    """Upload the end-of-run export (export.push_to_hub); a failure says how to push the finished run later."""
    out, e = RunDir(cfg.output_dir), cfg.export
    try:
        url = push_folder(out.export, e.push_to_hub, private=e.private, revision=e.revision or None)
    except ExportError as err:
        flags = (" --private" if e.private else "") + (f" --revision {e.revision}" if e.revision else "")
        raise ExportError(
            f"{err}. The run itself is complete; push it later with: "
            f"python -m rm export {out.root} --out {out.export} --push-to-hub {e.push_to_hub}{flags}"
        ) from None
    print(f"pushed: {url}")
