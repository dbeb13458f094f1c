"""The Bradley-Terry pairwise loss.

P(chosen > rejected) = sigmoid(r_chosen - r_rejected), so the negative log-likelihood of the human
preference is -log sigmoid(r_chosen - r_rejected) (Bradley & Terry, 1952; Ouyang et al., 2022).
Two optional terms:
- a per-pair margin m inside the sigmoid, -log sigmoid(r_c - r_r - m), which asks for a larger gap
  where annotators were more certain (Touvron et al., 2023, Llama 2, section 3.2.2);
- reward centring, coef * mean((r_c + r_r)^2), which keeps rewards near zero without changing
  which response wins (Eisenstein et al., 2023, "Helping or Herding?").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bradley_terry_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    margin: torch.Tensor | None = None,
    center_rewards_coef: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Mean (or, with `reduction="sum"`, summed) loss over the pairs: chosen, rejected and margin are [pairs].

    Training sums: a micro-batch's sum divided by the pairs of its whole optimizer step weighs every pair
    alike however the pairs fall on micro-batches and processes (rm/collate/shard.py).
    """
    diff = chosen - rejected
    if margin is not None:
        diff = diff - margin
    per_pair = -F.logsigmoid(diff)
    if center_rewards_coef:
        per_pair = per_pair + center_rewards_coef * (chosen + rejected) ** 2
    return per_pair.sum() if reduction == "sum" else per_pair.mean()
