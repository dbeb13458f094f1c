"""Checkpoints that a kill at any instant cannot corrupt: written aside, renamed into place, the last K kept.

`<output_dir>/checkpoints/step-N/` holds what `accelerator.save_state` writes (`model.safetensors`, the
optimizer, the RNG states of every process), `trainer_state.json` (where the run stands: optimizer step,
epoch, micro-batches consumed in that epoch, skipped steps, the learning-rate schedule, the metric sums
since the last log line and the log so far), the resolved `config.yaml`, and for LoRA peft's
`adapter_config.json` (rm/export/restore.py needs it to rebuild the model).

Every process writes into `checkpoints/.partial-step-N/`; once all are done the main process flushes
the files to disk and renames the folder to `step-N` (one atomic rename), so a folder named `step-N`
is always complete. A run killed mid-save leaves a `.partial-…` folder, which resume ignores and the
next save clears. Batches come from one plan per (seed, epoch) dealt to the processes (rm/collate/shard.py),
so the data position is just (epoch, micro-batches each process has done): a resumed run starts its share
of the plan there and sees the very batches it would have. The plan depends on processes x grad_accum, so
a run stopped mid-epoch resumes with the same product.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from accelerate import Accelerator

from rm.config import RunConfig, load_config, to_dict
from rm.config.loader import read_yaml
from rm.config.rundir import CONFIG, PARTIAL, STATE, RunDir, saved_config, write_config
from rm.errors import ConfigError
from rm.model.lora import is_lora, save_adapter_config

log = logging.getLogger("rm")


@dataclass
class TrainState:
    """Where a run stands; saved as trainer_state.json in every checkpoint."""

    step: int = 0
    """Optimizer steps done, skipped non-finite ones included."""
    epoch: int = 0
    """Epoch in progress (PairBatches plans its batches from (seed, epoch))."""
    batches_in_epoch: int = 0
    """Micro-batches of `epoch` that each process has consumed (the same number on every process)."""
    plan_slots: int = 0
    """Processes x grad_accum that the epoch's plan was dealt for (0: not recorded)."""
    max_steps: int = 0
    """The optimizer steps the run is to take, so that an export of an unfinished run can say "step N of M"
    (0: not recorded, a checkpoint of an earlier rm)."""
    nonfinite_skipped: int = 0
    """Optimizer steps skipped for a non-finite loss."""
    nonfinite_streak: int = 0
    """Of which, in a row up to now."""
    scheduler: dict = field(default_factory=dict)
    """The learning-rate scheduler's state_dict."""
    pending: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    """Sums over all processes' pairs since the last log line: loss, pairs ranked right, pairs."""
    history: list[dict] = field(default_factory=list)
    """The train_log.jsonl rows so far."""


def resume_point(cfg: RunConfig) -> Path | None:
    """The checkpoint to continue from according to `train.resume`, or None to start afresh."""
    run_dir, resume = RunDir(cfg.output_dir), cfg.train.resume
    existing = run_dir.complete_checkpoints()
    if not resume:
        if existing:
            raise ConfigError(
                f"{run_dir.root} already holds checkpoints of an earlier run (newest: {existing[-1][1].name}): "
                "continue it with train.resume=auto, or use another output_dir"
            )
        return None
    if resume == "auto":
        return existing[-1][1] if existing else None
    path = Path(resume)
    if not (path / STATE).is_file():
        raise ConfigError(f"train.resume={resume}: not a complete checkpoint (no {STATE} in it)")
    return path


def save(accelerator: Accelerator, cfg: RunConfig, state: TrainState, model: torch.nn.Module) -> Path:
    """Write checkpoint `step-{state.step}` atomically and keep the newest `train.save_total_limit`.

    Called by every process (each saves its RNG state; FSDP and DeepSpeed save shards).
    """
    run_dir = RunDir(cfg.output_dir)
    final, partial = run_dir.checkpoint(state.step), run_dir.checkpoint(state.step, partial=True)
    if accelerator.is_main_process:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(partial))
    accelerator.wait_for_everyone()  # every process's files are in
    if accelerator.is_main_process:
        (partial / STATE).write_text(json.dumps(dataclasses.asdict(state), indent=1) + "\n")
        write_config(cfg, partial / CONFIG)  # as the run directory's: no one-time commands, absolute paths
        hf = accelerator.unwrap_model(model).hf
        if is_lora(hf):
            save_adapter_config(hf, partial)
        for f in partial.rglob("*"):  # on disk before the rename makes the checkpoint visible
            if f.is_file():
                _fsync(f)
        if final.exists():  # the same step saved again (a run restarted with train.resume=auto)
            shutil.rmtree(final)
        partial.rename(final)
        _fsync(run_dir.checkpoints)
        prune(run_dir.root, cfg.train.save_total_limit)
        log.info("checkpoint: %s", final)
    accelerator.wait_for_everyone()
    return final


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune(run_dir: Path, keep: int) -> None:
    """Remove all but the newest `keep` complete checkpoints (0 keeps all) and leftover partial folders."""
    folder = RunDir(run_dir)
    for partial in folder.checkpoints.glob(f"{PARTIAL}*"):
        shutil.rmtree(partial, ignore_errors=True)
    complete = folder.complete_checkpoints()
    for _, path in complete[: max(0, len(complete) - keep)] if keep > 0 else []:
        shutil.rmtree(path)


def load(accelerator: Accelerator, path: Path, cfg: RunConfig, scheduler) -> TrainState:
    """Restore model, optimizer, RNG states (accelerate) and the run's position (trainer_state.json)."""
    saved = load_config(path / CONFIG) if (path / CONFIG).is_file() else None
    if saved is not None:
        changed = _changed_keys(to_dict(saved), to_dict(saved_config(cfg)), ignore={"train.resume", "train.overwrite"})
        if changed:
            log.warning("resuming with settings that differ from the checkpoint's: %s", ", ".join(changed[:8]))
    state = TrainState(**json.loads((path / STATE).read_text()))
    slots = accelerator.num_processes * cfg.train.grad_accum
    if state.batches_in_epoch and state.plan_slots and state.plan_slots != slots:
        raise ConfigError(
            f"{path} stopped inside an epoch planned for processes x train.grad_accum = {state.plan_slots}, "
            f"this run has {accelerator.num_processes} x {cfg.train.grad_accum} = {slots}: resume with the same product"
        )
    accelerator.load_state(str(path))
    scheduler.load_state_dict(state.scheduler)
    log.info("resumed from %s: step %d, epoch %d, %d micro-batches in", path, state.step, state.epoch,
             state.batches_in_epoch)  # fmt: skip
    return state


def with_its_split(cfg: RunConfig, path: Path | None) -> RunConfig:
    """The config to resume checkpoint `path` with: a run saved before `data.split_version` existed held out by
    record (version 1), and resuming it must keep that held-out set rather than draw the new default's."""
    if path is None or not (path / CONFIG).is_file():
        return cfg
    saved = read_yaml(path / CONFIG).get("data") or {}
    if "split_version" in saved or cfg.data.split_version == 1:
        return cfg
    log.info("resuming a run that held out by record: data.split_version=1, as it was trained")
    return replace(cfg, data=replace(cfg.data, split_version=1))


def _changed_keys(a: dict, b: dict, ignore: set[str], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        dotted = prefix + key
        if dotted in ignore:
            continue
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            out += _changed_keys(a[key], b[key], ignore, dotted + ".")
        elif a.get(key) != b.get(key):
            out.append(f"{dotted} {a.get(key)!r} -> {b.get(key)!r}")
    return out
