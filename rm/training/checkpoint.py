"""Checkpoints that a kill at any instant cannot corrupt: written aside, renamed into place, the last K kept.

`<output_dir>/checkpoints/step-N/` holds what `accelerator.save_state` writes (`model.safetensors`, the
optimizer, the RNG states of every process), `trainer_state.json` (where the run stands: optimizer step,
epoch, micro-batches consumed in that epoch, skipped steps, the learning-rate schedule, the metric sums
since the last log line and the log so far), the resolved `config.yaml`, and for LoRA peft's
`adapter_config.json` (rm/export/restore.py needs it to rebuild the model).

Every process writes into `checkpoints/.partial-step-N/`; once all are done the main process flushes
the files to disk, writes `complete.json` last (the size and CRC-32 of every other file, rm/config/rundir.py)
and renames the folder to `step-N`. A `step-N` saved again (a run resumed from an earlier checkpoint) is
renamed aside first and deleted after, never emptied file by file, so a kill at any instant leaves one whole
checkpoint of that step. Only a checkpoint whose marker's sizes and checksums hold is resumed: `resume=auto`
skips a damaged one, saying which and why, for the newest that verifies. Weights that are not
finite are never saved: a diverging run keeps its last finite checkpoint, which pruning cannot reach. Finite weights
whose rewards are not finite are saved marked diverged (rm/training/faults.py): pruning keeps the newest good
checkpoint beside them, and resume=auto passes over them as over a damaged one.

Batches come from one plan per (seed, epoch) dealt to the processes (rm/collate/shard.py), so the data
position is just (epoch, micro-batches each process has done): a resumed run starts its share of the plan
there and sees the very batches it would have. The plan depends on processes x grad_accum and on the
settings in `PLAN_KEYS`, so a run stopped mid-epoch resumes only with the same ones.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from accelerate import Accelerator

from rm.config import RunConfig, load_config, to_dict
from rm.config.atomic import write_text
from rm.config.loader import saved_eos, saved_split_version, saved_text_version
from rm.config.rundir import (
    CONFIG,
    MARKER,
    PARTIAL,
    STATE,
    RunDir,
    checkpoint_problem,
    saved_config,
    write_config,
)
from rm.errors import ConfigError, TrainingError
from rm.export.restore import diverged_mark, newest_good
from rm.model.lora import is_lora, save_adapter_config
from rm.training.checkpoint_folder import move_in, seal, space_kept
from rm.training.faults import finite_weights

log = logging.getLogger("rm")

PLAN_KEYS = ("train.batch_size", "collator.max_tokens", "collator.pack_length", "collator.group_pairs")
"""Settings that change which pairs an epoch's micro-batches hold: a run stopped inside an epoch resumes with the
same values, or its next steps would draw pairs it already saw (train.batch_size 64 -> 32 at step 20 re-trained
them)."""


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
    plan: dict = field(default_factory=dict)
    """The `PLAN_KEYS` settings the epoch's plan was made with (empty: not recorded)."""
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
    diverged: str = ""
    """Why this checkpoint's weights diverged (non-finite rewards on the eval set or the probe batch), or ''."""


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
    if resume == "auto":  # a folder closed by its marker counts even where its trainer_state.json went missing
        return newest_verified(run_dir, sorted(set(existing) | set(run_dir.marked_checkpoints())))
    path = Path(resume)
    if not (path / STATE).is_file():
        raise ConfigError(f"train.resume={resume}: not a complete checkpoint (no {STATE} in it)")
    why = checkpoint_problem(path)
    if why is not None and (path / MARKER).exists():
        raise ConfigError(f"train.resume={resume}: damaged checkpoint: {why}")
    if why is not None:
        log.warning("train.resume=%s: not verified (%s); resuming it as asked", resume, why)
    return path


def newest_verified(run_dir: RunDir, existing: list[tuple[int, Path]]) -> Path | None:
    """The newest checkpoint whose files are as its marker says; each one passed over is one warning line."""
    skipped = []
    for _, path in reversed(existing):
        why = checkpoint_problem(path) or (f"diverged: {mark}" if (mark := diverged_mark(path)) else None)
        if why is None:
            return path
        log.warning("resume: skipping %s: %s", path, why)
        skipped.append(f"{path.name} ({why})")
    if skipped:
        raise ConfigError(
            f"{run_dir.root}: no checkpoint to resume: {'; '.join(skipped)}. Name one to resume as it is with "
            "train.resume=PATH, or start again with train.overwrite=true"
        )
    return None


def save(accelerator: Accelerator, cfg: RunConfig, state: TrainState, model: torch.nn.Module) -> Path | None:
    """Write checkpoint `step-{state.step}` atomically and keep the newest `train.save_total_limit`; None (nothing
    written, one warning) when the weights are not finite.

    Called by every process (each saves its RNG state; FSDP and DeepSpeed save shards).
    """
    run_dir = RunDir(cfg.output_dir)
    if not finite_weights(accelerator, model):
        newest = run_dir.marked_checkpoints()
        log.warning("step %d: the weights are not finite: no checkpoint written (the newest stays %s)", state.step,
                    newest[-1][1].name if newest else "none")  # fmt: skip
        return None
    state.plan = plan_settings(cfg)
    final, partial = run_dir.checkpoint(state.step), run_dir.checkpoint(state.step, partial=True)
    if accelerator.is_main_process:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    accelerator.wait_for_everyone()
    with space_kept(partial, accelerator.is_main_process):
        accelerator.save_state(str(partial))
    accelerator.wait_for_everyone()  # every process's files are in
    if accelerator.is_main_process:
        with space_kept(partial, True):
            write_text(partial / STATE, json.dumps(dataclasses.asdict(state), indent=1) + "\n")
            write_config(cfg, partial / CONFIG)  # as the run directory's: no one-time commands, absolute paths
            hf = accelerator.unwrap_model(model).hf
            if is_lora(hf):
                save_adapter_config(hf, partial)
            seal(partial, state.step)  # the marker, last
        move_in(partial, final)
        prune(run_dir.root, cfg.train.save_total_limit)
        log.info("checkpoint: %s", final)
        if state.diverged:
            good = newest_good(run_dir.root)
            kept = f"the newest good one is {good.name}" if good else "none is good"
            log.warning("step %d: %s: %s is marked diverged (rm export and rm serve refuse it); %s", state.step,
                        state.diverged, final.name, kept)  # fmt: skip
    accelerator.wait_for_everyone()
    return final


def plan_settings(cfg: RunConfig) -> dict:
    return {key: getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1]) for key in PLAN_KEYS}


def prune(run_dir: Path, keep: int) -> None:
    """Remove all but the newest `keep` checkpoints closed by their marker (0 keeps all) and leftover partial
    folders; the newest good one stays whatever diverged ones came after it. A folder without a marker is not counted
    and not removed: rm cannot tell it is one of its saves."""
    folder = RunDir(run_dir)
    for partial in folder.checkpoints.glob(f"{PARTIAL}*"):
        shutil.rmtree(partial, ignore_errors=True)
    complete, good = folder.marked_checkpoints(), newest_good(run_dir)
    for _, path in complete[: max(0, len(complete) - keep)] if keep > 0 else []:
        if path != good:
            shutil.rmtree(path)


def load(accelerator: Accelerator, path: Path, cfg: RunConfig, scheduler) -> TrainState:
    """Restore model, optimizer, RNG states (accelerate) and the run's position (trainer_state.json)."""
    saved = load_config(path / CONFIG) if (path / CONFIG).is_file() else None
    if saved is not None:
        changed = _changed_keys(to_dict(saved), to_dict(saved_config(cfg)), ignore={"train.resume", "train.overwrite"})
        if changed:
            log.warning("resuming with settings that differ from the checkpoint's: %s", ", ".join(changed[:8]))
    state = resumable_state(path, cfg, accelerator.num_processes)
    try:
        accelerator.load_state(str(path))
    except Exception as e:
        said = str(e).strip().splitlines()[0] if str(e).strip() else ""
        said = "" if "weights_only" in str(e) else f": {said}"  # torch's advice would run the file's pickled code
        raise TrainingError(f"{path}: cannot resume it ({type(e).__name__}{said}): damaged, or not rm's") from None
    scheduler.load_state_dict(state.scheduler)
    log.info("resumed from %s: step %d, epoch %d, %d micro-batches in", path, state.step, state.epoch,
             state.batches_in_epoch)  # fmt: skip
    return state


def resumable_state(path: Path, cfg: RunConfig, processes: int) -> TrainState:
    """The checkpoint's position, once this run can go on from it: the same plan inside an epoch (processes x
    grad_accum, batch size, budgets), or its next steps would train on pairs it already saw. Asked before the
    run directory is claimed too, so a refused resume leaves its config.yaml as it was."""
    try:
        state = TrainState(**json.loads((path / STATE).read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise TrainingError(f"{path}: cannot resume it: unreadable {STATE} ({type(e).__name__})") from None
    slots = processes * cfg.train.grad_accum
    if state.batches_in_epoch and state.plan_slots and state.plan_slots != slots:
        raise ConfigError(
            f"{path} stopped inside an epoch planned for processes x train.grad_accum = {state.plan_slots}, "
            f"this run has {processes} x {cfg.train.grad_accum} = {slots}: resume with the same product"
        )
    changed = [f"{k}={v} (now {plan_settings(cfg)[k]})" for k, v in state.plan.items() if plan_settings(cfg)[k] != v]
    if state.batches_in_epoch and changed:
        raise ConfigError(
            f"{path} stopped inside an epoch planned with {', '.join(changed)}: resume with the same settings, "
            "or its next steps would train on pairs it already saw"
        )
    return state


def checked_resume(cfg: RunConfig, path: Path | None, processes: int) -> RunConfig:
    """The config to resume checkpoint `path` with (None: a fresh start), refused before anything is written when
    the checkpoint cannot be resumed by this run (`resumable_state`)."""
    if path is None:
        return cfg
    resumable_state(path, cfg, processes)
    return with_its_split(cfg, path)


def with_its_split(cfg: RunConfig, path: Path | None) -> RunConfig:
    """The config to resume checkpoint `path` with: its saved `data.split_version` (1, by record, where a run saved
    before the key existed has none), so that resuming keeps the held-out set it trained beside rather than draw
    the current default's (which would train on prompts it held out so far); its `data.text_version` and
    `data.eos` likewise, so that the texts it goes on training on end as the ones it trained on."""
    if path is None or not (path / CONFIG).is_file():
        return cfg
    version, text = saved_split_version(path / CONFIG), saved_text_version(path / CONFIG)
    if text != cfg.data.text_version:  # and the record -> text rule it trained with, so its texts stay the same
        log.info("resuming with the checkpoint's record -> text rule: data.text_version=%s, as it was trained", text)
        cfg = replace(cfg, data=replace(cfg.data, text_version=text))
    eos = saved_eos(path / CONFIG)
    if eos != cfg.data.eos:  # and its responses' ending, which its export will record for every scorer
        log.info("resuming with the checkpoint's response ending: data.eos=%s, as it was trained", eos)
        cfg = replace(cfg, data=replace(cfg.data, eos=eos))
    if version == cfg.data.split_version:
        return cfg
    log.info("resuming with the checkpoint's hold-out rule: data.split_version=%s, as it was trained", version)
    return replace(cfg, data=replace(cfg.data, split_version=version))


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
