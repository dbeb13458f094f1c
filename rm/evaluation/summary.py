"""Pair-level summaries, overall and per subset: the shape of every eval.json rm writes.

Training's eval, an export's eval and `rm eval` all report `{"overall": {...}, "subsets": {name: {...}}}`;
`by_subset` is the one place that splits rows by subset, so the three cannot disagree on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rm.evaluation.metrics import ece


def summarize(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, Any]:
    """Accuracy (a tie counts as half right: the model expressed no preference), n, mean gap, and the
    expected calibration error of sigmoid(r_chosen - r_rejected) (see `rm.evaluation.metrics.ece`), and the
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


def by_subset(summary: Callable[[Any], dict], subset_ids: torch.Tensor | np.ndarray, names: list[str]) -> dict:
    """{"overall": summary(all rows), "subsets": {name: summary(its rows)}} for each name that has rows.

    `summary` takes a boolean mask over the rows; `subset_ids[i]` is row i's index into `names`.
    """
    everything = np.ones(len(subset_ids), dtype=bool)
    if isinstance(subset_ids, torch.Tensor):
        everything = torch.from_numpy(everything)
    result = {"overall": summary(everything), "subsets": {}}
    for i, name in enumerate(names):
        mask = subset_ids == i
        if mask.any():
            result["subsets"][name] = summary(mask)
    return result


def summarize_by_subset(scores: dict[str, torch.Tensor], names: list[str]) -> dict:
    """eval.json's numbers from {"chosen", "rejected", "subset_ids"} rewards (each [pairs])."""
    c, r = scores["chosen"].float(), scores["rejected"].float()
    return by_subset(lambda m: summarize(c[m], r[m]), scores["subset_ids"], names)
