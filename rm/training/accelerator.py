"""Where a run runs and logs: the accelerator for this process, its precision, its trackers, and the full weights
at the end.

The run config says what a run does; the launcher (`accelerate launch --config_file
configs/accelerate/*.yaml`) says where: how many processes, DDP, FSDP or DeepSpeed ZeRO-3. The trackers of
`train.report_to` are checked to be installed and write under <output_dir>/rm (`rm.config.rundir.TRACKING`);
TensorBoard is the default.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator, PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin, parse_flag_from_env

from rm.config import RunConfig, to_dict
from rm.config.checks import trackers
from rm.config.rundir import TRACKING, RunDir, record_written
from rm.errors import ConfigError, TrainingError
from rm.export.outputs import note_attribute_sigma
from rm.model.group_loss import learned_nu
from rm.model.reward import transformers_model


def mixed_precision(requested: str) -> str | None:
    """`auto`: bf16 where the GPU has it, else full precision; empty: what `accelerate launch` chose."""
    if requested == "auto":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    return requested or None


def make_accelerator(cfg: RunConfig) -> Accelerator:
    """The accelerator for this process, checked to span every launched process.

    Several processes launched on a machine without an accelerator (torchrun, `accelerate launch
    --multi_gpu`, configs/accelerate/cpu-ddp.yaml) run DDP over gloo on the CPU: accelerate does that
    only when told `cpu`, and otherwise each process would silently train a model of its own. FSDP
    launcher configs shard over gloo there too (`shard_on_cpu`); DeepSpeed configs are refused.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    on_cpu = world > 1 and not torch.accelerator.is_available()
    if on_cpu and parse_flag_from_env("ACCELERATE_USE_DEEPSPEED"):  # accelerate would quietly run DDP instead
        raise TrainingError("DeepSpeed runs on GPUs only here; on the CPU shard with configs/accelerate/cpu-fsdp.yaml")
    # accelerate logs each checkpoint's files at INFO ("[RANK 0] Model weights saved in ..."), six lines a save.
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    if world == 1 and not torch.distributed.is_initialized():
        # accelerate keeps its state per Python process: a second run in the same process (an in-process
        # sweep trial, a notebook) with another mixed_precision would be refused. One process: start afresh.
        AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(
        cpu=on_cpu,
        gradient_accumulation_steps=cfg.train.grad_accum,
        mixed_precision=mixed_precision(cfg.train.mixed_precision),
        log_with=check_trackers(cfg) or None,
        project_dir=cfg.output_dir,
    )
    if accelerator.num_processes != world:
        raise TrainingError(f"launched as {world} processes, but accelerate set up {accelerator.num_processes}")
    if on_cpu and parse_flag_from_env("ACCELERATE_USE_FSDP"):
        shard_on_cpu(accelerator)
    return accelerator


def shard_on_cpu(accelerator: Accelerator) -> None:
    """FSDP over gloo on the CPU (configs/accelerate/cpu-fsdp.yaml), which accelerate does not set up itself.

    accelerate turns FSDP on only for GPU-like devices: on the CPU it would run plain DDP under an
    FSDP launcher config without a word. torch's `fully_shard` does work over gloo, so the FSDP plugin
    (read from the launcher's FSDP_* variables) is put in place by hand before anything is prepared.
    """
    plugin = FullyShardedDataParallelPlugin()
    if plugin.fsdp_version != 2:
        raise TrainingError("FSDP on the CPU needs fsdp_version: 2 in the launcher config")
    if accelerator.mixed_precision != "no":
        plugin.set_mixed_precision(accelerator.mixed_precision)  # as accelerate does on GPUs
    PartialState().distributed_type = DistributedType.FSDP  # every AcceleratorState() copies it from here
    accelerator.state.distributed_type = DistributedType.FSDP
    accelerator.state.fsdp_plugin = plugin


def exportable(accelerator: Accelerator, model: torch.nn.Module, rebuild: Callable[[], torch.nn.Module]):
    """The trained `.hf` model (a PeftModel under LoRA) on the main process, None on the others.

    Under FSDP or DeepSpeed ZeRO-3 each process holds a shard: the full state dict is gathered (a
    collective, so every process calls this) and loaded into a fresh copy that `rebuild` makes on the CPU.
    """
    if accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return with_tie_nu(accelerator.unwrap_model(model)) if accelerator.is_main_process else None
    state = accelerator.get_state_dict(model)  # ZeRO-3 needs zero3_save_16bit_model: true (see its YAML)
    if not accelerator.is_main_process:
        return None
    fresh = rebuild()
    fresh.load_state_dict(state)
    return with_tie_nu(fresh)


def with_tie_nu(model: torch.nn.Module):
    """`model.hf`, its config holding Davidson's learned nu (`rm_davidson_nu`) where the loss learned one, so the
    export's config.json keeps it beside the weights."""
    if getattr(model, "tie_nu", None) is not None:
        transformers_model(model.hf).config.rm_davidson_nu = float(learned_nu(model.tie_nu.detach().float()))
    note_attribute_sigma(model.hf, getattr(model, "attribute_log_scale", None))  # gaussian attribute loss's sigmas
    return model.hf


def check_trackers(cfg: RunConfig) -> list[str]:
    """train.report_to as a list, each tracker installed: accelerate only warns and logs nowhere otherwise."""
    from accelerate.tracking import get_available_trackers

    wanted = trackers(cfg)
    available = {str(t) for t in get_available_trackers()} | {"all"}
    missing = [name for name in wanted if name not in available]
    if missing:
        raise ConfigError(
            f"train.report_to: {', '.join(missing)} is not installed (pip install {' '.join(missing)}), "
            f"so the run would log nowhere: install it, or set train.report_to=[tensorboard] or []"
        )
    return wanted


def flat(d: dict, prefix: str = "") -> dict:
    """Trackers want flat scalars: {"train": {"lr": 1}} -> {"train.lr": 1}; lists become strings."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= flat(v, f"{prefix}{k}.")
        else:
            out[prefix + k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


def start_trackers(accelerator: Accelerator, cfg: RunConfig) -> None:
    """Start the run's trackers with its config, and record the files they made under <output_dir>/rm by name in
    the run's manifest (TensorBoard makes all of its own there now: an event file, and a `<time>/` folder with
    the hyperparameters' events and hparams.yml): they keep growing, so no size could prove them later, and a
    user's own runs beside them in rm/ are not the run's, which train.overwrite must tell apart."""
    folder = RunDir(cfg.output_dir).tensorboard
    before = set(_files(folder))
    accelerator.init_trackers(TRACKING, config=flat(to_dict(cfg)))
    if accelerator.is_main_process:
        record_written(cfg.output_dir, [f for f in _files(folder) if f not in before], grown=True)


def _files(folder: Path) -> list[Path]:
    return [f for f in folder.rglob("*") if f.is_file()] if folder.is_dir() else []
