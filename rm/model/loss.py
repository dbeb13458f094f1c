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
) -> torch.Tensor:
    """Mean loss over the pairs: chosen, rejected and margin are [pairs]; returns a scalar."""
    diff = chosen - rejected
    if margin is not None:
        diff = diff - margin
    loss = -F.logsigmoid(diff).mean()
    if center_rewards_coef:
        loss = loss + center_rewards_coef * ((chosen + rejected) ** 2).mean()
    return loss
