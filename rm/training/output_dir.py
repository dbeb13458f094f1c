"""Whose output_dir it is: what a run may do there, decided before anything is written, and when it claims it.

A folder becomes a run's only when training starts (after the data and the model loaded): `claim_output_dir`
writes the manifest and config.yaml then. Until that moment `unclaimed` takes back whatever the start wrote
(synthetic data, the run's tokenizer, the data report), so a run that fails on its data, its model or a
Ctrl-C while tokenizing leaves no file behind and the fixed command is not refused. Files with rm's names
that no rm run claimed are never written over, not even with `train.overwrite`.

The layout itself (which files say a folder holds a run, which a run writes) is `rm.config.rundir.RunDir`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from rm.config import RunConfig
from rm.config.rundir import MANIFEST, RunDir, write_config
from rm.errors import ConfigError


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
    if not out.owned():
        raise ConfigError(
            f"output_dir={out.root} holds {', '.join(present)}, which no rm run claimed (no {MANIFEST}): rm does not "
            "write over files it did not write; move them or choose another output_dir"
        )
    finished, checkpoints = out.finished_step(), out.complete_checkpoints()
    present = [path.name for path in out.run_files if path.exists()] or present  # the files that say what it is
    if t.resume:
        if finished is not None and t.resume == "auto":
            return Start.FINISHED  # a checkpoint named by its path is run again from there: the user asked for it
        return Start.CLEAR if t.resume == "auto" and not checkpoints else Start.RESUME
    if t.overwrite:
        return Start.CLEAR
    if finished is not None:
        raise ConfigError(
            f"output_dir={out.root} already holds a run that finished at step {finished} ({', '.join(present)}): "
            "use another output_dir, or replace it with train.overwrite=true"
        )
    if checkpoints:
        raise ConfigError(
            f"output_dir={out.root} already holds an unfinished run (newest checkpoint: {checkpoints[-1][1].name}): "
            "continue it with train.resume=auto, replace it with train.overwrite=true, or use another output_dir"
        )
    raise ConfigError(
        f"output_dir={out.root} already holds a run that stopped before its first checkpoint ({', '.join(present)}): "
        "start it again with train.resume=auto or train.overwrite=true, or use another output_dir"
    )


@contextmanager
def unclaimed(cfg: RunConfig, start: Start, is_main: bool) -> Iterator[None]:
    """From the start of a run to its claim: clear the earlier run's files (`Start.CLEAR`), create output_dir,
    check it can be written; if anything in the block fails (a data error, an unreachable model, Ctrl-C or
    SIGTERM while tokenizing), remove what the block wrote there, and output_dir itself if it made it.

    Only the main process writes; the others pass through.
    """
    out = RunDir(cfg.output_dir)
    if not is_main:
        yield
        return
    made = [p for p in (out.root, *out.root.parents) if not p.exists()]  # the folders mkdir will create
    try:
        if start is Start.CLEAR:
            for path in out.written:
                _remove(path)
        out.root.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out.root).close()  # writable: found now, not after minutes of tokenizing
    except OSError as e:
        raise _cannot_write(out, e) from None
    before = {path for path in out.written if path.exists()}
    try:
        yield
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


def claim_output_dir(cfg: RunConfig) -> None:
    """Make output_dir this run's (main process, when training starts): its manifest and its config.yaml."""
    out = RunDir(cfg.output_dir)
    manifest = {"claimed": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid()}
    manifest["files"] = sorted(path.name for path in out.written)  # what train.overwrite may delete here
    try:
        write_config(cfg, out.config)
        out.manifest.write_text(json.dumps(manifest, indent=1) + "\n")
    except OSError as e:
        raise _cannot_write(out, e) from None


def _remove(path: Path, ignore_errors: bool = False) -> None:
    """One of rm's run files or folders (`RunDir.written`), gone."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=ignore_errors)
    else:
        path.unlink(missing_ok=True)


def _cannot_write(out: RunDir, e: OSError) -> ConfigError:
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
