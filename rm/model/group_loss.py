"""Losses over groups: one prompt, K responses and what is known about their order.

Every function takes the rewards of a micro-batch's responses as one flat vector `r` (the layouts' reward
order, rm/model/reward.py:group_rewards) plus index tensors naming which responses are compared, so a
group of 2 and a group of 64 go through the same code, and a pair is a group of two.

- Bradley-Terry over every strictly ordered pair of a group, each pair weighted `pair_weights` (the same
  total weight per group, as InstructGPT trained all C(K,2) comparisons of a prompt as one element,
  arXiv 2203.02155 section 3.5; or the same weight per pair). For plain pairs, `bradley_terry_loss` takes
  the two reward vectors: P(chosen > rejected) = sigmoid(r_chosen - r_rejected) (Bradley & Terry, 1952;
  Ouyang et al., 2022), with two optional terms: a per-pair margin m inside the sigmoid, which asks for a
  larger gap where annotators were more certain (Touvron et al., 2023, Llama 2, section 3.2.2); and reward
  centring, coef * mean((r_c + r_r)^2), which keeps rewards near zero without changing which response wins
  (Eisenstein et al., 2023, "Helping or Herding?").
- Davidson's tie model (Davidson, 1970, JASA 65:317): with pi = exp(r) and d = r_a - r_b,
      P(a > b) = pi_a / (pi_a + pi_b + nu sqrt(pi_a pi_b)) = e^(d/2) / (e^(d/2) + e^(-d/2) + nu)
      P(a = b) = nu sqrt(pi_a pi_b) / (...)              = nu / (e^(d/2) + e^(-d/2) + nu)
  nu >= 0 says how likely ties are; at nu = 0 the strict term is Bradley-Terry's -log sigmoid(d).
- Soft labels: a pair whose label is a probability p rather than 1 (its preference strength,
  rm/data/formats/strength.py) adds the cross-entropy -(p log sigmoid(d) + (1 - p) log sigmoid(-d)).
- Plackett-Luce (Plackett, 1975; Luce, 1959): the likelihood of a whole ranking, each response chosen
  in turn from those not yet placed, P = prod_i exp(r_i) / sum_{j placed at or after i} exp(r_j). Tied
  responses are not chosen over each other: a response's rivals are itself and the responses ranked
  strictly below it, so a tie adds no term, as `loss.ties=skip` does for pairs. For two ordered
  responses it is Bradley-Terry.

All return sums over the micro-batch: training divides by the weight of the whole optimizer step (the
groups or pairs of every micro-batch on every process), so every group weighs alike however the groups
fall on micro-batches and processes (rm/collate/shard.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

WEIGHTINGS = ("group", "pair")


def pair_weights(
    pair_group: torch.Tensor, groups: int, weighting: str, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Each ordered pair's weight, [pairs]: 1 / (its group's ordered pairs) with `group`, so a group's
    terms add up to 1 whatever its K; 1 with `pair`. For groups of two both are 1 (today's loss)."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting {weighting!r}: expected one of {WEIGHTINGS}")
    if weighting == "pair":
        return torch.ones(pair_group.shape, dtype=dtype, device=pair_group.device)
    per_group = torch.bincount(pair_group, minlength=groups).clamp(min=1).to(dtype)
    return 1.0 / per_group[pair_group]


def pairwise_loss(
    r: torch.Tensor,
    better: torch.Tensor,
    worse: torch.Tensor,
    weight: torch.Tensor | None = None,
    margin: torch.Tensor | None = None,
) -> torch.Tensor:
    """sum_pairs weight * -log sigmoid(r_better - r_worse - margin): Bradley-Terry over ordered pairs."""
    diff = r[better] - r[worse]
    if margin is not None:
        diff = diff - margin
    per_pair = -F.logsigmoid(diff)
    return (per_pair if weight is None else per_pair * weight).sum()


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


def soft_bradley_terry(d: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """[pairs]: the cross-entropy of a soft label p against P(a > b) = sigmoid(d),
    -(p log sigmoid(d) + (1 - p) log sigmoid(-d)) (loss.strength=soft). p = 1 is Bradley-Terry's
    -log sigmoid(d); p = 0.5 at d = 0 is log 2; its minimum is at d = logit(p), a gap as sure as the label."""
    return -(p * F.logsigmoid(d) + (1 - p) * F.logsigmoid(-d))


def davidson_loss(
    r: torch.Tensor,
    better: torch.Tensor,
    worse: torch.Tensor,
    tie_a: torch.Tensor,
    tie_b: torch.Tensor,
    nu: torch.Tensor | float,
    weight: torch.Tensor | None = None,
    tie_weight: torch.Tensor | None = None,
    margin: torch.Tensor | None = None,
) -> torch.Tensor:
    """The negative log-likelihood of Davidson's model: strict pairs (better, worse) and tied pairs (tie_a, tie_b).

    -log P(a > b) = log(e^(d/2) + e^(-d/2) + nu) - d/2, -log P(a = b) = log(e^(d/2) + e^(-d/2) + nu) - log nu,
    both through logsumexp, so large rewards do not overflow and nu = 0 is exactly Bradley-Terry for strict
    pairs. A tie under nu = 0 is impossible: its term is infinite, which a config with ties refuses first.
    """
    nu = torch.as_tensor(nu, dtype=r.dtype, device=r.device)
    log_nu = torch.log(nu)

    def log_norm(d: torch.Tensor) -> torch.Tensor:
        half = d / 2
        return torch.logsumexp(torch.stack([half, -half, log_nu.expand_as(half)]), dim=0)

    d = r[better] - r[worse]
    if margin is not None:
        d = d - margin
    strict = log_norm(d) - d / 2
    tied = log_norm(r[tie_a] - r[tie_b]) - log_nu
    strict = strict if weight is None else strict * weight
    tied = tied if tie_weight is None else tied * tie_weight
    return strict.sum() + tied.sum()


def plackett_luce_loss(r: torch.Tensor, group: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    """sum over groups of -log P(ranking): `group` [responses] says whose group each reward is (0..G-1), `rank`
    [responses] its place (0 best; equal ranks tie). Response i's rivals are i and the responses of its group
    ranked strictly below it; a response with no such rival adds nothing."""
    same = group[:, None] == group[None, :]
    below = rank[None, :] > rank[:, None]
    rivals = same & (below | torch.eye(len(r), dtype=torch.bool, device=r.device))
    log_denominator = torch.logsumexp(r[None, :].masked_fill(~rivals, float("-inf")), dim=1)
    chosen = (same & below).any(dim=1)
    return (log_denominator - r)[chosen].sum()


def learned_nu(raw: torch.Tensor) -> torch.Tensor:
    """Davidson's nu from a trained unconstrained scalar (softplus keeps it positive; 0.0 gives about 0.69)."""
    return F.softplus(raw)
