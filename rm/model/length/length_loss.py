"""The length head's training terms, added to a micro-batch's summed loss (rm/model/objective.py:training_loss).

The preference loss sees only differences within ordered pairs, so the correlation term is about them too: for
each ordered pair (better, worse) of a group (a pair's chosen and rejected, or the ordered pairs a group's loss
uses), dq, dl and dn are the differences of the quality output, the length output and the token count n. A
reward that ranks by the marker alone differs by one margin in every pair: dq is constant, its covariance with dn
is 0, and the term leaves it alone, whereas a correlation over responses would fight it (where the better answer
is mostly the longer, a marker-only reward correlates with length across responses by construction).

Each ordered pair p carries the weight v_p = (its group's weight in the optimizer step) / (the group's ordered
pairs), so the weights of a step sum to the step's weight, by which the loop divides every micro-batch's summed
loss: a sum of v_p * f_p over micro-batches and processes is the weighted mean of f over the step, whatever their
number. With z = (d - mean) / std under the running statistics of the differences (`LengthHead.statistics`,
detached) and rho their running correlation with dn, the term of one pair is

    length_corr_coef * [(1 - P(dl)) + rho_q * (P(dq) - rho_q / 2)] + length_orth_coef * cos(w_q, w_l)^2
    P(x) = z_x * z_n - rho_x / 2 * (z_x^2 - s_x),   s_x = var_x / std_x^2

P's weighted mean over a step is the step's correlation of x with dn to first order around the running statistics,
and its gradient in x_p, (z_n - rho_x * z_x) / std_x per unit weight, is exactly that correlation's gradient there.
For the quality output std^2 = var + QUALITY_SCALE^2 (rm/model/length/length_head.py), so the gradient stays bounded
as its spread shrinks, and rho_q * (P(dq) - rho_q / 2) is the first-order form of rho_q^2 / 2 (its gradient, rho_q
times the correlation's, and its value): smooth at 0, where |rho_q|'s subgradient would flip sign from step to step.
So the bracket is 1 - corr(dl, dn) + corr(dq, dn)^2 / 2, in a form that adds up. The orthogonality term is the same
for every group, so a step adds it once, at its full coefficient. The correlation term waits for the first optimizer
step's statistics (before them there is nothing to standardise by).
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


def pair_weights(weights: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[ordered pairs]: each group's step weight ([groups]) shared equally among its ordered pairs."""
    group = batch["pair_group"]
    count = torch.zeros_like(weights).index_add_(0, group, torch.ones_like(group, dtype=weights.dtype))
    return (weights / count.clamp(min=1))[group]


def pearson_terms(x: torch.Tensor, n: torch.Tensor, stats, k: int) -> torch.Tensor:
    """P(x) of every pair for series k (0 quality, 1 length output) against the token count differences `n`."""
    mean, std, rho, share, _ = stats
    dtype = x.dtype
    zx = (x - mean[k].to(dtype)) / std[k].to(dtype)
    zn = (n - mean[2].to(dtype)) / std[2].to(dtype)
    return zx * zn - rho[k].to(dtype) / 2 * (zx * zx - share[k].to(dtype))


def length_terms(
    cfg: LossConfig,
    quality: torch.Tensor,
    length: torch.Tensor,
    batch: dict[str, torch.Tensor],
    weights: torch.Tensor,
    head: LengthHead,
) -> torch.Tensor:
    """The summed correlation and orthogonality terms of one micro-batch (quality and length outputs [responses],
    each group's step weight [groups]); its ordered pairs are added to the head's sums for the step's update."""
    weights = weights.to(quality.dtype)
    v = pair_weights(weights, batch)
    better, worse = batch["better"], batch["worse"]
    tokens = response_tokens(batch).to(quality.dtype)
    dq, dl, dn = quality[better] - quality[worse], length[better] - length[worse], tokens[better] - tokens[worse]
    stats = head.statistics()  # before this micro-batch: the same on every process
    head.accumulate(v, dq, dl, dn)
    p_length, p_quality = pearson_terms(dl, dn, stats, 1), pearson_terms(dq, dn, stats, 0)
    rho_q, ready = stats[2][0].to(quality.dtype), stats[4].to(quality.dtype)
    # rho_q * P(dq) has the gradient of rho_q^2 / 2; less rho_q^2 / 2, its value at the running statistics is that
    corr = (v * ready * ((1 - p_length) + rho_q * (p_quality - rho_q / 2))).sum()
    return cfg.length_corr_coef * corr + cfg.length_orth_coef * head.orthogonality * weights.sum()
