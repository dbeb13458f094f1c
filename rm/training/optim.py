"""The optimizer: AdamW, decaying matrices only, on the fastest implementation the parameters allow; and the
learning-rate schedule.

torch picks the one-tensor-at-a-time AdamW for CPU parameters unless told otherwise; on the 5M-parameter
benchmark model that loop took about 14% of a training step (cProfile, `scripts/bench_train.py` data).
The fused kernel (CPU and CUDA since torch 2.4) does the same update in one call per parameter group,
and it is what transformers' Trainer (and so TRL) uses by default (`optim="adamw_torch_fused"`), so
the benchmarks compare like with like. Sharded parameters (FSDP2's DTensors) and DeepSpeed, which
wraps the optimizer itself, keep torch's own choice.

The schedules are the three transformers' `get_scheduler` names rm offers, written here as torch `LambdaLR`s with
the same multipliers (tests/training/test_schedule.py holds them to transformers' own, step by step): importing
`transformers.optimization` pulls in `transformers.trainer_utils` and with it peft, about 3 s of every training
process's start-up (`python -X importtime`), paid by each process of every launch.
"""

from __future__ import annotations

import math

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType

FUSED_DEVICES = ("cpu", "cuda")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only: decaying norms' gains and biases pulls them to zero for no benefit."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


def can_fuse(model: torch.nn.Module, accelerator: Accelerator) -> bool:
    """Whether every trained parameter is a plain floating tensor on a device the fused kernel serves."""
    if accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return False  # accelerate swaps in sharded parameters after the optimizer is made
    params = [p for p in model.parameters() if p.requires_grad]
    return bool(params) and all(
        type(p.data) is torch.Tensor and p.is_floating_point() and p.device.type in FUSED_DEVICES for p in params
    )


def make_optimizer(model: torch.nn.Module, accelerator: Accelerator, lr: float, weight_decay: float):
    """AdamW over `param_groups`, fused where `can_fuse` says so."""
    fused = can_fuse(model, accelerator)
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, fused=fused or None)


def warmup_factor(step: int, warmup: int) -> float:
    """The linear warm-up every schedule starts with: 0 at step 0, 1 at `warmup`."""
    return float(step) / float(max(1, warmup))


def schedule_factor(kind: str, step: int, warmup: int, total: int) -> float:
    """The learning rate's multiplier at optimizer step `step`: `linear` decays to 0 at `total`, `cosine` follows
    half a cosine period to 0 at `total`, `constant_with_warmup` stays at 1 after the warm-up."""
    if step < warmup:
        return warmup_factor(step, warmup)
    if kind == "constant_with_warmup":
        return 1.0
    if kind == "linear":
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    if kind == "cosine":
        progress = float(step - warmup) / float(max(1, total - warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"unknown learning-rate schedule {kind!r}")


def make_scheduler(
    optimizer: torch.optim.Optimizer, kind: str, warmup: int, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A `LambdaLR` whose multiplier is `schedule_factor` (checked here, not at the first step)."""
    schedule_factor(kind, warmup, warmup, total)

    def factor(step: int) -> float:
        return schedule_factor(kind, step, warmup, total)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
