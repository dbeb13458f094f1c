"""The length head's training terms, added to a micro-batch's summed loss (rm/model/objective.py:training_loss).

Each response i carries the weight u_i = (its group's weight in the optimizer step) / (responses of the group), so
the weights of a step sum to the step's weight, by which the loop divides every micro-batch's summed loss: a sum
of u_i * f_i over micro-batches and processes is the weighted mean of f over the step, whatever their number.

With z = (x - mean) / std under the running statistics (`LengthHead.statistics`, detached) and rho their running
correlation with the token count n, the term of one response is

    length_corr_coef * [(1 - P(length output)) + sign(rho_quality) * P(quality)] + length_orth_coef * |cos(w_q, w_l)|
    P(x) = z_x * z_n - rho_x / 2 * (z_x^2 - 1)

P's weighted mean over a step is the step's Pearson correlation of x with n to first order around the running
statistics, and its gradient in x_i, (z_n - rho_x * z_x) / std_x per unit weight, is exactly the gradient of that
correlation there: so the first bracket is ODIN's (1 - corr(length, n)) + |corr(quality, n)|, in a form that adds
up. The orthogonality term is the same for every response, so a step adds it once, at its full coefficient. The
correlation term waits for the first optimizer step's statistics (before them there is nothing to standardise by).
"""

from __future__ import annotations

import torch

from rm.config.loss_config import LossConfig
from rm.model.length.length_head import LengthHead


def response_tokens(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each response's token count [responses], in reward order, as the model sees it (after fitting to
    collator.max_length). Padded rows: the row's attended tokens less its prompt's. Shared and packed rows: the
    run of positions of the response's own (group, segment) that ends at its reward position. No host sync."""
    if "pair_ids" not in batch:
        rows = batch["attention_mask"].sum(1)
        return (rows - batch["prompt_lengths"].to(rows.device)[batch["response_group"]]).float()
    owner, segment = batch["pair_ids"].reshape(-1), batch["segment_ids"].reshape(-1)
    position = torch.arange(len(owner), device=owner.device)
    starts = torch.ones_like(owner, dtype=torch.bool)
    starts[1:] = (owner[1:] != owner[:-1]) | (segment[1:] != segment[:-1])
    start_of = torch.where(starts, position, torch.zeros_like(position)).cummax(0).values  # each run's first
    end = batch["reward_index"]
    return (end - start_of[end] + 1).float()


def response_weights(weights: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[responses]: each group's step weight ([groups]) shared equally among its responses."""
    group = batch["response_group"]
    count = torch.zeros_like(weights).index_add_(0, group, torch.ones_like(group, dtype=weights.dtype))
    return (weights / count.clamp(min=1))[group]


def pearson_terms(x: torch.Tensor, n: torch.Tensor, mean, std, rho, k: int) -> torch.Tensor:
    """P(x) of every response for series k (0 quality, 1 length output) against the token counts `n`."""
    dtype = x.dtype
    zx = (x - mean[k].to(dtype)) / std[k].to(dtype)
    zn = (n - mean[2].to(dtype)) / std[2].to(dtype)
    return zx * zn - rho[k].to(dtype) / 2 * (zx * zx - 1)


def length_terms(
    cfg: LossConfig,
    quality: torch.Tensor,
    length: torch.Tensor,
    batch: dict[str, torch.Tensor],
    weights: torch.Tensor,
    head: LengthHead,
) -> torch.Tensor:
    """The summed correlation and orthogonality terms of one micro-batch (quality and length outputs [responses],
    each group's step weight [groups]); its responses are added to the head's sums for the step's update."""
    u = response_weights(weights.to(quality.dtype), batch)
    tokens = response_tokens(batch).to(quality.dtype)
    mean, std, rho, ready = head.statistics()  # before this micro-batch: the same on every process
    head.accumulate(u, quality, length, tokens)
    p_length = pearson_terms(length, tokens, mean, std, rho, 1)
    p_quality = pearson_terms(quality, tokens, mean, std, rho, 0)
    corr = ready.to(quality.dtype) * ((1 - p_length) + torch.sign(rho[0]).to(quality.dtype) * p_quality)
    return (u * (cfg.length_corr_coef * corr + cfg.length_orth_coef * head.orthogonality)).sum()
