"""Held-out evaluation: accuracy overall and per subset, with counts and mean reward gap.

Rewards are gathered across processes with `gather_for_metrics`, which drops the samples
accelerate duplicates to even out the last batch, so every example counts exactly once.
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
    expected calibration error of sigmoid(r_chosen - r_rejected) (see `rm.metrics.ece`)."""
    diff = (chosen - rejected).double()
    correct = (diff > 0).double() + 0.5 * (diff == 0).double()
    return {
        "accuracy": correct.mean().item() if len(diff) else float("nan"),
        "n": len(diff),
        "ece": ece(chosen.double().numpy(), rejected.double().numpy()),
        "mean_margin": diff.mean().item() if len(diff) else float("nan"),
        "mean_chosen_reward": chosen.double().mean().item() if len(diff) else float("nan"),
        "mean_rejected_reward": rejected.double().mean().item() if len(diff) else float("nan"),
    }


@torch.no_grad()
def gather_rewards(
    model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(r_chosen, r_rejected, subset_ids), each [pairs] on the CPU, for the whole eval set in loader order.

    Every process gets every pair, once: accelerate shards whole batches round-robin and
    `gather_for_metrics` concatenates them back in the loader's order, dropping the samples it repeated
    to even out the last batch. Leaves the model in eval mode; the caller restores train mode.
    """
    model.eval()
    chosen, rejected, subset_ids = [], [], []
    for batch in loader:
        c, r = pair_rewards(model, batch)
        c, r, s = accelerator.gather_for_metrics((c, r, batch["subset_ids"]))
        chosen.append(c.float().cpu())
        rejected.append(r.float().cpu())
        subset_ids.append(s.cpu())
    empty = torch.zeros(0)
    return (
        torch.cat(chosen) if chosen else empty,
        torch.cat(rejected) if rejected else empty,
        torch.cat(subset_ids) if subset_ids else empty.long(),
    )


def evaluate(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator, subsets: list[str]) -> dict:
    """Return {"overall": {...}, "subsets": {name: {...}}} for the whole eval set."""
    c, r, s = gather_rewards(model, loader, accelerator)
    model.train()
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
