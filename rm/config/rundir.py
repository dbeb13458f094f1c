"""Where a run's files live: the one definition of the run directory's layout, for training, export, eval and sweeps.

<output_dir>/rm_run.json              the run's manifest: written when training starts, it says rm owns the folder
                                      and records each file the run writes, as it writes it (`record_written`)
<output_dir>/config.yaml              the resolved run config (one-time commands left out, local paths absolute)
<output_dir>/eval.json                the final held-out eval
<output_dir>/train_log.jsonl          one row per log step, appended as the run goes
<output_dir>/suites.jsonl             one row per leaderboard suite and eval (train.eval_suites)
<output_dir>/data_report.json         what loading the data skipped, repaired and mixed (counts)
<output_dir>/skipped.jsonl            each record left out or repaired
<output_dir>/data/                    the synthetic dataset (data.source=synthetic)
<output_dir>/tokenizer/               the tokenizer trained for the run (random-init models)
<output_dir>/rm/                      TensorBoard's events (accelerate's project name for the trackers)
<output_dir>/export/                  the end-of-run export (written as .export.partial/, renamed when whole)
<output_dir>/checkpoints/step-N/      a checkpoint, complete once its complete.json (sizes and CRC-32s) is in
<output_dir>/checkpoints/.partial-step-N/   one being written
<output_dir>/sweep_trial.log          a sweep trial's output (written by the sweep, not by the run)

Every module that reads or writes one of these goes through `RunDir`, so that a file cannot be renamed in
one place and looked for under its old name in another.

A folder is a run's only once training has started in it (the manifest and config.yaml are written then,
after the data and the model loaded): a run that fails before leaves no file behind, and a folder whose
rm-named files rm did not write is never written over (rm/training/output_dir.py). train.overwrite deletes a
file only where the manifest's record or its checkpoint's marker proves rm wrote it (rm/training/ownership.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from rm.config.atomic import write_text
from rm.config.loader import save_config
from rm.config.schema import RunConfig
from rm.config.sealed import MARKER, listed_files, record_of, seal_problem

MANIFEST = "rm_run.json"
"""Says that rm owns the folder's run files; written when training starts."""
MANIFEST_VERSION = 3
"""rm_run.json's layout. 3: `files` maps each file the run wrote whole to [size, CRC-32] (`sealed.record_of`),
`grown` names the files it keeps appending to (its logs, TensorBoard's events); 2 listed the start's files with
sizes and the names written after the claim; 1 (or no manifest) only names."""
CONFIG = "config.yaml"
"""The resolved run config, in a run directory and in each of its checkpoints."""
EVAL = "eval.json"
"""An eval result: a run's final eval, an export's, `rm eval`'s (written by rm.evaluation.metrics.write_eval)."""
CHECKPOINTS = "checkpoints"
PARTIAL = ".partial-"
STATE = "trainer_state.json"
"""Written into a checkpoint by training, with the run's position."""
"""Written last into a checkpoint: the size and CRC-32 of each of its other files. A checkpoint without one was
cut short (or saved by an rm before markers) and is never resumed or exported unasked."""
WEIGHTS = "model.safetensors"
"""The model's weights in a checkpoint (accelerate's save_state) and in an export."""
TRACKING = "rm"
"""accelerate's project name for the run's trackers: TensorBoard writes its events to <output_dir>/rm."""
_STEP = re.compile(r"step-(\d+)")


def partial_folder(folder: Path) -> Path:
    """Where `folder` is written before it is renamed into place (`export/` -> `.export.partial/`), so that an
    interrupted write never leaves a half-written folder under the real name."""
    folder = Path(folder)
    return folder.with_name(f".{folder.name}.partial")


@dataclass(frozen=True)
class RunDir:
    """A run's output_dir: the path of every file a run reads or writes there."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))  # cfg.output_dir is a str

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def config(self) -> Path:
        return self.root / CONFIG

    @property
    def eval_json(self) -> Path:
        return self.root / EVAL

    @property
    def train_log(self) -> Path:
        return self.root / "train_log.jsonl"

    @property
    def suites_log(self) -> Path:
        return self.root / "suites.jsonl"

    @property
    def data_report(self) -> Path:
        return self.root / "data_report.json"

    @property
    def skipped(self) -> Path:
        return self.root / "skipped.jsonl"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    @property
    def tensorboard(self) -> Path:
        return self.root / TRACKING

    @property
    def export(self) -> Path:
        return self.root / "export"

    @property
    def export_partial(self) -> Path:
        return partial_folder(self.export)

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def trial_log(self) -> Path:
        """A sweep trial's output; the sweep writes it before the run starts, so it is not in `written`."""
        return self.root / "sweep_trial.log"

    def checkpoint(self, step: int, partial: bool = False) -> Path:
        return self.checkpoints / f"{PARTIAL if partial else ''}step-{step}"

    def complete_checkpoints(self, holding: str = STATE) -> list[tuple[int, Path]]:
        """(step, folder) of every checkpoint of the run that holds the file `holding`, oldest first: what looks
        like a checkpoint; whether it is whole is `checkpoint_problem`'s to say."""
        found = [(checkpoint_step(p), p) for p in self.checkpoints.glob("step-*")]
        return sorted((s, p) for s, p in found if s is not None and (p / holding).is_file())

    def marked_checkpoints(self) -> list[tuple[int, Path]]:
        """(step, folder) of every checkpoint closed by its completion marker, oldest first (checksums unread)."""
        return self.complete_checkpoints(holding=MARKER)

    @property
    def run_files(self) -> tuple[Path, ...]:
        """What says the folder already holds a run (any one of them)."""
        return (self.config, self.eval_json, self.train_log, self.export, self.checkpoints, self.manifest)

    def finished_step(self) -> int | None:
        """The steps of a finished run (one whose final eval.json is written), else None."""
        if not self.eval_json.is_file():
            return None
        try:
            return int(json.loads(self.eval_json.read_text())["train"]["steps"])
        except (ValueError, TypeError, KeyError):
            return 0  # finished, though its eval.json does not say after how many steps

    @property
    def written(self) -> tuple[Path, ...]:
        """Everything a run writes into the folder: what train.overwrite deletes."""
        more = (self.suites_log, self.tensorboard, self.data, self.tokenizer, self.data_report, self.skipped)
        more += (self.export_partial,)
        return self.run_files + more


def read_manifest(root: str | Path) -> dict | None:
    """The run directory's rm_run.json, or None where it has none (or one that is not a JSON object)."""
    try:
        manifest = json.loads((Path(root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def record_written(root: str | Path, paths: Iterable[Path], grown: bool = False) -> None:
    """Record in run directory `root`'s manifest the files rm has just written there, so that train.overwrite
    can later tell them from a user's: each with its [size, CRC-32], or with `grown` by name alone (a file that
    keeps growing: a log, TensorBoard's events). A folder stands for every file in it, and replaces what was
    recorded under it (a new export). Nothing happens where `root` has no manifest of this layout: an export into
    a folder of one's own, or a run directory not yet claimed."""
    out = RunDir(root)
    manifest = read_manifest(out.root)
    if manifest is None or manifest.get("version") != MANIFEST_VERSION:
        return
    files, named = dict(manifest.get("files") or {}), set(manifest.get("grown") or [])
    for path in map(Path, paths):
        rel = path.relative_to(out.root).as_posix()
        files = {name: r for name, r in files.items() if name != rel and not name.startswith(f"{rel}/")}
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                name = f.relative_to(out.root).as_posix()
                if grown:
                    named.add(name)
                else:
                    files[name] = record_of(f)
    manifest |= {"files": files, "grown": sorted(named)}
    write_text(out.manifest, json.dumps(manifest, indent=1) + "\n")


def with_paths(cfg: RunConfig, change: Callable[[str, str], str]) -> RunConfig:
    """`cfg` with each field that may hold a local path (output_dir, data.source, data.cache_dir, model and
    tokenizer name_or_path) replaced by `change(key, value)`: the one list of them, for whatever rewrites paths."""
    d, m, t = cfg.data, cfg.model, cfg.tokenizer
    data = replace(d, source=change("data.source", d.source), cache_dir=change("data.cache_dir", d.cache_dir))
    return replace(
        cfg,
        output_dir=change("output_dir", cfg.output_dir),
        data=data,
        model=replace(m, name_or_path=change("model.name_or_path", m.name_or_path)),
        tokenizer=replace(t, name_or_path=change("tokenizer.name_or_path", t.name_or_path)),
    )


def absolute_paths(cfg: RunConfig) -> RunConfig:
    """`cfg` with output_dir and every local path in it (data.source, data.cache_dir, a tokenizer or model
    folder) made absolute from the current directory, so that its saved config.yaml resumes and exports from
    any directory. Names that are not local paths (synthetic, a Hub name) are left as they are."""

    def absolute(name: str) -> str:
        return os.path.abspath(os.path.expanduser(name))

    def made_absolute(key: str, name: str) -> str:
        if key == "output_dir" or (key == "data.cache_dir" and name):
            return absolute(name)  # where rm writes: absolute whether or not it exists yet
        if key == "data.source" and name == "synthetic":
            return name
        return absolute(name) if name and Path(name).expanduser().exists() else name

    return with_paths(cfg, made_absolute)


def saved_config(cfg: RunConfig) -> RunConfig:
    """The config a run keeps (its config.yaml, each checkpoint's, an export's: exportdir.RUN_CONFIG): its paths
    absolute, and without `train.resume` and `train.overwrite`, which are commands to one invocation and not
    properties of the run (a saved `overwrite: true` made `train.resume=auto` on it retrain from step 0)."""
    cfg = absolute_paths(cfg)
    return replace(cfg, train=replace(cfg.train, resume="", overwrite=False))


def write_config(cfg: RunConfig, path: str | Path) -> None:
    """Write `saved_config(cfg)` as YAML to `path`."""
    save_config(saved_config(cfg), path)


def checkpoint_step(path: Path) -> int | None:
    """N for a folder named `step-N`, else None (partial folders and anything else)."""
    match = _STEP.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


# ---- checkpoints that prove themselves: sizes and CRC-32s in a marker written last (as the data cache's) ----


def checkpoint_files(folder: Path) -> dict[str, list[int]]:
    """[size, CRC-32] of every file in checkpoint `folder` but its marker (rm/config/sealed.py)."""
    return listed_files(folder)


def checkpoint_problem(folder: Path) -> str | None:
    """Why checkpoint `folder` must not be trusted, or None when every file is as its marker says."""
    return seal_problem(
        folder, f"no {MARKER}: cut short while being written or replaced, or saved by an rm without checksums"
    )
