"""The optimizer: AdamW, decaying matrices only, on the fastest implementation the parameters allow.

torch picks the one-tensor-at-a-time AdamW for CPU parameters unless told otherwise; on the 5M-parameter
benchmark model that loop took about 14% of a training step (cProfile, `scripts/bench_train.py` data).
The fused kernel (CPU and CUDA since torch 2.4) does the same update in one call per parameter group,
and it is what transformers' Trainer (and so TRL) uses by default (`optim="adamw_torch_fused"`), so
the benchmarks compare like with like. Sharded parameters (FSDP2's DTensors) and DeepSpeed, which
wraps the optimizer itself, keep torch's own choice.
"""

from __future__ import annotations

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
