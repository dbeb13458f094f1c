"""Held-out evaluation: accuracy overall and per subset, with counts and mean reward gap.

Rewards are gathered across processes with each pair's index in its split and repeats dropped, so
every example counts exactly once whatever the batch sizes and the number of processes.
"""

from __future__ import annotations

from typing import Any

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from rm.metrics import ece
from rm.model import pair_rewards


def summarize(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, Any]:
    """Accuracy (a tie counts as half right: the model expressed no preference), n, mean gap, and the
    expected calibration error of sigmoid(r_chosen - r_rejected) (see `rm.metrics.ece`), and the
    Bradley-Terry loss -log sigmoid(r_chosen - r_rejected) without margin (what sweeps can minimise)."""
    diff = (chosen - rejected).double()
    correct = (diff > 0).double() + 0.5 * (diff == 0).double()
    return {
        "accuracy": correct.mean().item() if len(diff) else float("nan"),
        "loss": torch.nn.functional.softplus(-diff).mean().item() if len(diff) else float("nan"),
        "n": len(diff),
        "ece": ece(chosen.double().numpy(), rejected.double().numpy()),
        "mean_margin": diff.mean().item() if len(diff) else float("nan"),
        "mean_chosen_reward": chosen.double().mean().item() if len(diff) else float("nan"),
        "mean_rejected_reward": rejected.double().mean().item() if len(diff) else float("nan"),
    }


@torch.no_grad()
def gather_rewards(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator) -> dict[str, torch.Tensor]:
    """Every eval pair's rewards exactly once, in split order, on every process.

    Batches differ in size (token budgets) and accelerate repeats a few so that every process gets
    the same number; so each process keeps its pairs with their split index, the lists are gathered
    once at the end, and repeats are dropped by index. The model's train/eval mode is restored.
    """
    was_training = model.training
    model.eval()
    parts: dict[str, list[torch.Tensor]] = {"index": [], "chosen": [], "rejected": [], "subset": []}
    for batch in loader:
        c, r = pair_rewards(model, batch)
        parts["index"].append(batch["pair_index"])
        parts["chosen"].append(c.detach())
        parts["rejected"].append(r.detach())
        parts["subset"].append(batch["subset_ids"])
    model.train(was_training)
    device = accelerator.device
    local = {k: torch.cat(v).to(device) if v else torch.empty(0, device=device) for k, v in parts.items()}
    local["index"], local["subset"] = local["index"].long(), local["subset"].long()
    if accelerator.num_processes > 1:
        local = {k: accelerator.gather(accelerator.pad_across_processes(v, pad_index=-1)) for k, v in local.items()}
    local = {k: v.cpu() for k, v in local.items()}
    order = torch.argsort(local["index"], stable=True)
    local = {k: v[order] for k, v in local.items()}
    index = local["index"]
    first = (index >= 0) & torch.cat([torch.ones(1, dtype=torch.bool), index[1:] != index[:-1]])
    return {k: v[first] for k, v in local.items()}


def evaluate(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator, subsets: list[str]) -> dict:
    """Return {"overall": {...}, "subsets": {name: {...}}} for the whole eval set."""
    g = gather_rewards(model, loader, accelerator)
    c, r, s = g["chosen"].float(), g["rejected"].float(), g["subset"]
    result = {"overall": summarize(c, r), "subsets": {}}
    for i, name in enumerate(subsets):
        mask = s == i
        if mask.any():
            result["subsets"][name] = summarize(c[mask], r[mask])
    return result


def format_table(result: dict) -> str:
    rows = [(name, m) for name, m in result["subsets"].items()] + [("overall", result["overall"])]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'subset':<{width}}  accuracy      n  mean margin", "-" * (width + 29)]
    lines += [f"{name:<{width}}  {m['accuracy']:8.4f}  {m['n']:5d}  {m['mean_margin']:11.4f}" for name, m in rows]
    return "\n".join(lines)
