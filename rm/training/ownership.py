"""Which files in a run directory rm wrote: what train.overwrite may delete, and what stops it.

Deleting rm's folders whole (`checkpoints/`, `export/`, `rm/`, ...) would take with them a user's notes in
export/, a backup folder in checkpoints/, their own TensorBoard runs under rm/. So every file under one of rm's
names (`RunDir.written`) is judged on its own, by what rm recorded as it wrote it:

- the manifest's `files`: [size, CRC-32] of what the run wrote whole (the start's data/ and tokenizer/, its
  data report, the export, eval.json; rm.config.rundir.record_written);
- the manifest's `grown`: its logs and TensorBoard's event files, by name, since they keep growing;
- a checkpoint's complete.json: the size (and CRC-32 up to 16 MiB) of each of its files; a `.partial-` folder in
  checkpoints/ and `.export.partial/` are writes of rm's cut short;
- config.yaml where it loads as a run config, and the manifest itself.

A file rm did not write stops train.overwrite before anything is deleted, and so does one rm wrote that has
changed since (an export/README.md edited by hand): rm cannot tell an edit from damage, and a deletion cannot be
undone while a refusal costs one `mv`. Checking reads no large file: weights are known by size (rm.config.sealed).

A run directory of an older rm (manifest layout 2, 1 or none) recorded nothing after its start: there the
export's files, TensorBoard's and the logs are known by their names, as that rm wrote them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rm.config import RunConfig, load_config
from rm.config.exportdir import EXPORT_FILES
from rm.config.rundir import (
    CHECKPOINTS,
    CONFIG,
    MANIFEST,
    MANIFEST_VERSION,
    PARTIAL,
    STATE,
    TRACKING,
    RunDir,
    checkpoint_step,
    read_manifest,
)
from rm.config.sealed import MARKER, as_recorded
from rm.errors import ConfigError, RMError

MINE, CHANGED, FOREIGN = "mine", "changed", "foreign"
SHOWN = 20
"""Files a refusal names before it counts the rest."""


@dataclass
class Proof:
    """What is under rm's names in a run directory, file by file."""

    removable: list[Path] = field(default_factory=list)
    """rm's paths there (`RunDir.written`) whose every file rm wrote and left as it wrote it."""
    mine: list[str] = field(default_factory=list)
    """Every file rm wrote, as it wrote it (relative to output_dir)."""
    unproven: list[str] = field(default_factory=list)
    """Every other file under rm's names, sorted; one rm wrote and that changed since says so."""


def proof(out: RunDir) -> Proof:
    """Every file under rm's names in `out`, judged (see the module's docstring)."""
    judge, found = _judge(out), Proof()
    for path in (p for p in out.written if p.exists()):
        files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
        unproven = len(found.unproven)
        for f in files:
            rel = f.relative_to(out.root).as_posix()
            verdict = judge(rel, f)
            if verdict == MINE:
                found.mine.append(rel)
            else:
                found.unproven.append(f"{rel} (changed since rm wrote it)" if verdict == CHANGED else rel)
        if len(found.unproven) == unproven:
            found.removable.append(path)
    found.unproven.sort()
    return found


def refusal(out: RunDir, unproven: list[str]) -> ConfigError:
    """train.overwrite refused: every file that stops it (the first `SHOWN` and a count), and what to do."""
    named = ", ".join(unproven[:SHOWN]) + (f" and {len(unproven) - SHOWN} more" if len(unproven) > SHOWN else "")
    files = f"{len(unproven)} file{'s' if len(unproven) > 1 else ''}"
    return ConfigError(
        f"output_dir={out.root} holds {named}, which rm cannot prove the run there wrote ({files} under rm's names, "
        f"which a new run there replaces: not recorded in its {MANIFEST} or a checkpoint's {MARKER}, or changed "
        "since): rm deletes only its own files, as it wrote them; move these out of output_dir or choose another "
        "output_dir"
    )


def run_config(out: RunDir) -> RunConfig | None:
    """The folder's config.yaml as a run config, or None where it is not one (a file of the user's)."""
    try:
        return load_config(out.config)
    except (RMError, OSError, ValueError, TypeError, AttributeError):
        return None


def _judge(out: RunDir) -> Callable[[str, Path], str]:
    """rel, path -> MINE, CHANGED or FOREIGN, from the folder's manifest, config.yaml and checkpoint markers."""
    manifest = read_manifest(out.root) or {}
    version = manifest.get("version")
    files = manifest.get("files") if version in (2, MANIFEST_VERSION) else None
    files = files if isinstance(files, dict) else {}
    grown = set(manifest.get("grown") or []) if version == MANIFEST_VERSION else set()
    cfg, seals = run_config(out), {}

    def judge(rel: str, path: Path) -> str:
        top, _, rest = rel.partition("/")
        if rel == MANIFEST or (rel == CONFIG and cfg is not None) or rel in grown:
            return MINE
        if rel in files:
            return MINE if as_recorded(path, files[rel]) else CHANGED
        if top == CHECKPOINTS:
            return _checkpoint_file(out, rest, path, seals, version != MANIFEST_VERSION)
        if top == out.export_partial.name:
            return MINE  # an export cut short: rm writes nothing else under that name
        if version != MANIFEST_VERSION and _by_name(rel, cfg, version):
            return MINE
        return FOREIGN

    return judge


def _checkpoint_file(out: RunDir, rest: str, path: Path, seals: dict, old_rm: bool) -> str:
    """A file of checkpoints/ (`rest`: its path under it), by its checkpoint's marker."""
    folder, _, inner = rest.partition("/")
    if folder.startswith(PARTIAL) and inner:
        return MINE  # a save cut short, or the old copy of a step saved again: prune() clears them too
    if checkpoint_step(folder) is None or not inner:
        return FOREIGN
    if folder not in seals:
        seals[folder] = _sealed_files(out.checkpoints / folder)
    listed = seals[folder]
    if listed is None:  # an rm before markers wrote none: its checkpoints were deleted whole
        return MINE if old_rm and (out.checkpoints / folder / STATE).is_file() else FOREIGN
    if inner == MARKER:
        return MINE
    return FOREIGN if inner not in listed else MINE if as_recorded(path, listed[inner]) else CHANGED


def _sealed_files(folder: Path) -> dict | None:
    try:
        listed = json.loads((folder / MARKER).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return listed if isinstance(listed, dict) else None


def _by_name(rel: str, cfg: RunConfig | None, version: object) -> bool:
    """Whether an older rm (manifest layout 2, 1 or none) wrote `rel`, from its name: it recorded no sizes after
    its start. Layout 2 recorded the start's files (checked before this); before it, the config says which of
    data/ and tokenizer/ the run made."""
    parts = PurePosixPath(rel).parts
    top, name = parts[0], parts[-1]
    if rel in ("eval.json", "train_log.jsonl", "suites.jsonl"):
        return True
    if top == "export":
        return len(parts) == 2 and any(PurePosixPath(name).match(pattern) for pattern in EXPORT_FILES)
    if top == TRACKING:  # accelerate's TensorBoard: rm/events.out.tfevents.*, rm/<time.time()>/{events…, hparams.yml}
        events = name.startswith("events.out.tfevents.")
        return (len(parts) == 2 and events) or (
            len(parts) == 3 and _is_time(parts[1]) and (events or name == "hparams.yml")
        )
    if version == 2:
        return False  # it recorded its start's files, sizes and all
    if rel in ("data_report.json", "skipped.jsonl"):
        return True
    if cfg is None:
        return False
    if top == "data":
        return cfg.data.source == "synthetic"
    return top == "tokenizer" and not (cfg.tokenizer.name_or_path or cfg.model.name_or_path)


def _is_time(name: str) -> bool:
    try:
        float(name)
    except ValueError:
        return False
    return True
