"""The loss of a process reward model: binary cross-entropy of every step's label against sigmoid(head output at
the step's last token), soft labels kept as they are (a Math-Shepherd label of 0.7 is a target of 0.7, not 1 or 0).

`loss.steps: last` trains the last step of each solution only, the solution's outcome: an outcome reward model on
the same data and layout. `loss.step_preference_coef` adds the pairwise (or group) loss between a problem's
solutions ranked by outcome (rm/data/steps/step_groups.py), read at the solutions' last tokens.

The unit an optimizer step averages over is a step (or, under `last`, a solution): each group weighs its count of
them (`step_weights`, what rm/collate/shard.py sums per optimizer step), so the update is the mean over the step's
labelled steps whatever the number of processes and accumulation steps, as the preference loss is over its pairs.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from rm.config.loss_config import LossConfig
from rm.errors import ConfigError
from rm.tokens.store import EncodedSplit


def step_terms(
    cfg: LossConfig, outputs: torch.Tensor, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed binary cross-entropy, steps counted) of one micro-batch's step outputs ([steps], fp32 logits)."""
    target = batch["step_target"].to(outputs.dtype)
    used = ~target.isnan()
    if cfg.steps == "last":
        used = used & batch["step_last"]
    per_step = F.binary_cross_entropy_with_logits(outputs, target.nan_to_num(), reduction="none")
    return torch.where(used, per_step, torch.zeros_like(per_step)).sum(), used.sum()


def step_weights(cfg: LossConfig, split: EncodedSplit) -> np.ndarray:
    """Each group's weight in its optimizer step: its steps (`every`) or its solutions (`last`), from the step
    columns alone."""
    counts = split.table.column("step_counts").combine_chunks()
    per_response = counts.values.to_numpy()
    offsets = counts.offsets.to_numpy()
    group = np.repeat(np.arange(len(split)), np.diff(offsets))
    per = per_response if cfg.steps == "every" else (per_response > 0).astype(np.int64)
    return np.bincount(group, weights=per, minlength=len(split)).astype(np.int64)


def check_step_run(cfg, counts: dict) -> None:
    """Refuse, in one line, what a stepwise run cannot train (`counts`: the data report's `labels`)."""
    head, loss = cfg.model.head, cfg.loss
    if "steps" not in counts:
        return
    refused = [
        (bool(head.attributes), "model.head.attributes"),
        (bool(head.length), "model.head.length"),
        (loss.strength == "soft", "loss.strength=soft"),
    ]
    for on, name in refused:
        if on:
            raise ConfigError(f"{name}: the data is stepwise (each step its own label); unset {name} to train a "
                              "process reward model, or train it on preference data")  # fmt: skip
