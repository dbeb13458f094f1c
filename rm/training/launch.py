"""Where a run runs: the accelerator for this process, its precision, and the full weights at the end.

The run config says what a run does; the launcher (`accelerate launch --config_file
configs/accelerate/*.yaml`) says where: how many processes, DDP, FSDP or DeepSpeed ZeRO-3.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType

from rm.config import RunConfig
from rm.errors import TrainingError


def mixed_precision(requested: str) -> str | None:
    """`auto`: bf16 where the GPU has it, else full precision; empty: what `accelerate launch` chose."""
    if requested == "auto":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    return requested or None


def make_accelerator(cfg: RunConfig) -> Accelerator:
    """The accelerator for this process, checked to span every launched process.

    Several processes launched on a machine without an accelerator (torchrun, `accelerate launch
    --multi_gpu`, configs/accelerate/cpu-ddp.yaml) run DDP over gloo on the CPU: accelerate does that
    only when told `cpu`, and otherwise each process would silently train a model of its own.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    accelerator = Accelerator(
        cpu=world > 1 and not torch.accelerator.is_available(),
        gradient_accumulation_steps=cfg.train.grad_accum,
        mixed_precision=mixed_precision(cfg.train.mixed_precision),
        log_with=cfg.train.report_to or None,
        project_dir=cfg.output_dir,
    )
    if accelerator.num_processes != world:
        raise TrainingError(f"launched as {world} processes, but accelerate set up {accelerator.num_processes}")
    return accelerator


def exportable(accelerator: Accelerator, model: torch.nn.Module, rebuild: Callable[[], torch.nn.Module]):
    """The trained `.hf` model (a PeftModel under LoRA) on the main process, None on the others.

    Under FSDP or DeepSpeed ZeRO-3 each process holds a shard: the full state dict is gathered (a
    collective, so every process calls this) and loaded into a fresh copy that `rebuild` makes on the CPU.
    """
    if accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return accelerator.unwrap_model(model).hf if accelerator.is_main_process else None
    state = accelerator.get_state_dict(model)  # ZeRO-3 needs zero3_save_16bit_model: true (see its YAML)
    if not accelerator.is_main_process:
        return None
    fresh = rebuild()
    fresh.load_state_dict(state)
    return fresh.hf
