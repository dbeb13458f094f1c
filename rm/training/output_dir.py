"""Whose output_dir it is: what a run may do there, decided before anything is written, and when it claims it.

A folder becomes a run's only when training starts (after the data and the model loaded): `claim_output_dir`
writes the manifest (`rm_run.json`) and config.yaml then. Until that moment `unclaimed` takes back whatever the
start wrote (synthetic data, the run's tokenizer, the data report), so a run that fails on its data, its model
or a Ctrl-C while tokenizing leaves no file behind and the fixed command is not refused.

`train.overwrite` deletes only what rm can prove it wrote (issue 30: it once deleted a user's `data/`): the
files the start wrote, listed in the manifest with their sizes, and the names the run writes after its claim
(absent when it claimed the folder). A run directory of an rm that wrote no manifest (or issue 29's list of
names) is rm's only if its config.yaml loads as a run config; of it only rm's known files go, `data/` only
where that config generated it and `tokenizer/` only where it trained one. Anything else with rm's names
there stops the run in one line before a file is touched.

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

from rm.config import RunConfig, load_config
from rm.config.atomic import write_text
from rm.config.rundir import MANIFEST, RunDir, write_config
from rm.errors import ConfigError, ExportError, RMError
from rm.export.hub import push_folder

VERSION = 2
"""rm_run.json's layout: 2 lists the start's files with sizes and the names written after the claim."""


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
    unproven = proof(out)[1]
    if start is Start.CLEAR and unproven:
        raise ConfigError(
            f"output_dir={out.root} holds {', '.join(unproven[:3])}, which rm cannot prove the run there wrote (not "
            f"in its {MANIFEST}): rm deletes only its own files; move them or choose another output_dir"
        )
    return start


def owned(out: RunDir) -> bool:
    """Whether rm's run files here are a run's: its manifest, or (a run of an rm that wrote none) a config.yaml
    that loads as a run config with a log, an eval.json or checkpoints beside it."""
    if _manifest(out) is not None:
        return True
    evidence = any(p.exists() for p in (out.eval_json, out.train_log, out.checkpoints))
    return evidence and _run_config(out) is not None


def proof(out: RunDir) -> tuple[list[Path], list[str]]:
    """(the paths train.overwrite may delete, what else with rm's names is there: relative paths rm cannot
    prove it wrote)."""
    manifest = _manifest(out)
    if manifest is not None and manifest.get("version") == VERSION:
        names, sizes = {out.manifest.name, *manifest.get("later", [])}, manifest.get("files", {})
        if _run_config(out) is not None:
            names.add(out.config.name)
    else:  # an rm that wrote no manifest, or only names (issue 29): rm's known files, nothing the config read
        cfg, sizes = _run_config(out), {}
        names = {p.name for p in out.written} - {out.data.name, out.tokenizer.name}
        if cfg is None:
            names -= {out.config.name}
        elif cfg.data.source == "synthetic":
            names.add(out.data.name)
        if cfg is not None and not (cfg.tokenizer.name_or_path or cfg.model.name_or_path):
            names.add(out.tokenizer.name)
    removable, unproven = [], []
    for path in (p for p in out.written if p.exists()):
        if path.name in names:
            removable.append(path)
            continue
        files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
        mine = [f for f in files if sizes.get(str(f.relative_to(out.root))) == f.stat().st_size]
        if len(mine) == len(files):
            removable.append(path)
        else:
            unproven += [str(f.relative_to(out.root)) for f in files if f not in mine][:3]
    return removable, unproven


def _manifest(out: RunDir) -> dict | None:
    try:
        manifest = json.loads(out.manifest.read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _run_config(out: RunDir) -> RunConfig | None:
    """The folder's config.yaml as a run config, or None where it is not one (a file of the user's)."""
    try:
        return load_config(out.config)
    except (RMError, OSError, ValueError, TypeError, AttributeError):
        return None


@contextmanager
def unclaimed(cfg: RunConfig, start: Start, is_main: bool) -> Iterator[set[str]]:
    """From the start of a run to its claim: clear the earlier run's files (`Start.CLEAR`: only what `proof`
    says rm wrote), create output_dir, check it can be written; if anything in the block fails (a data error,
    an unreachable model, Ctrl-C or SIGTERM while tokenizing), remove what the block wrote there, and output_dir
    itself if it made it.

    Yields the names of rm's paths there that are the run's (for `claim_output_dir`), filled in when the block
    ends. Only the main process writes; the others pass through.
    """
    out, ours = RunDir(cfg.output_dir), set()
    if not is_main:
        yield ours
        return
    made = [p for p in (out.root, *out.root.parents) if not p.exists()]  # the folders mkdir will create
    try:
        removable = proof(out)[0] if out.root.is_dir() else []
        if start is Start.CLEAR:
            for path in removable:
                _remove(path)
        else:
            ours.update(p.name for p in removable if p.exists())
        out.root.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out.root).close()  # writable: found now, not after minutes of tokenizing
    except OSError as e:
        raise _cannot_write(out, e) from None
    before = {path for path in out.written if path.exists()}
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
    ours.update(p.name for p in out.written if p not in before and p.exists())


def claim_output_dir(cfg: RunConfig, ours: set[str] = frozenset()) -> None:
    """Make output_dir this run's (main process, when training starts): its config.yaml, then its manifest,
    which lists with their sizes the files of `ours` (what the start wrote, and what an earlier claim of the
    run listed) and the names the run writes from now on, none of which is there unless rm wrote it (the
    start refuses otherwise): what train.overwrite may delete here."""
    out = RunDir(cfg.output_dir)
    try:
        write_config(cfg, out.config)
        files = {}
        for path in (out.root / name for name in sorted(ours - {out.config.name, out.manifest.name})):
            for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
                if f.is_file():
                    files[str(f.relative_to(out.root))] = f.stat().st_size
        later = sorted(p.name for p in out.written if p.name not in _START_WRITES | {out.config.name})
        manifest = {"version": VERSION, "claimed": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid()}
        manifest |= {"host": socket.gethostname(), "files": files, "later": later}
        write_text(out.manifest, json.dumps(manifest, indent=1) + "\n")
    except OSError as e:
        raise _cannot_write(out, e) from None


_START_WRITES = {"data", "tokenizer", "data_report.json", "skipped.jsonl"}
"""What a run writes before its claim (checked by size); every other name of `RunDir.written` comes after it."""


def _remove(path: Path, ignore_errors: bool = False) -> None:
    """One of rm's run files or folders (`RunDir.written`), gone."""
    if path.is_dir():
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
