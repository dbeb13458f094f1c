"""A micro-batch's training loss as `loss.*` asks, and how much weight it carries in its optimizer step.

The loop sums each micro-batch's loss and divides by the weight of the whole step on every process
(rm/collate/shard.py: `step_pairs`), so the update is the same whatever the processes and accumulation steps.
The weight unit is what `loss.group_weighting` makes equal: a group (its comparisons share a weight of 1, as
InstructGPT trained a prompt's C(K,2) comparisons as one element) or a comparison. For pairs both units are
one pair, and the loss is exactly the Bradley-Terry loss of rm/model/loss.py, term for term.

Davidson's tie weight nu, when learned, is a parameter of the reward model (`RewardModel.tie_nu`): trained by
the same optimizer, saved in its checkpoints, and written into the export's config.json as `rm_davidson_nu`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rm.collate.comparisons import comparison_counts
from rm.config.schema import LossConfig
from rm.model.group_loss import davidson_loss, learned_nu, plackett_luce_loss
from rm.tokens.store import EncodedGroup


def tie_parameter(cfg: LossConfig) -> torch.nn.Parameter | None:
    """The trained scalar behind nu (softplus(0) = 0.69 to start), or None when nu is fixed or ties are skipped."""
    if cfg.ties == "davidson" and cfg.davidson_nu == "learned":
        return torch.nn.Parameter(torch.zeros(()))
    return None


def step_weight(cfg: LossConfig, strict: int, ties: int) -> int:
    """The weight one group with `strict` ordered and `ties` tied pairs adds to its optimizer step (the unit of
    `step_pairs`), as `preference_loss` counts it: ties count only under Davidson, and a group with nothing to
    compare (a tied pair under `ties=skip`) adds nothing."""
    n = strict + (ties if cfg.ties == "davidson" else 0)
    return n if cfg.group_weighting == "pair" and cfg.type == "pairwise" else int(n > 0)


def group_weights(cfg: LossConfig, train: Sequence[EncodedGroup]) -> np.ndarray | None:
    """Each training group's weight in its optimizer step, or None where every group weighs one (pairs, or groups
    under `loss.group_weighting=group` that all have something to compare): what rm/collate/shard.py sums."""
    strict, tied = comparison_counts(train)
    weights = np.array([step_weight(cfg, s, t) for s, t in zip(strict.tolist(), tied.tolist(), strict=True)])
    return None if (weights == 1).all() else weights


def preference_loss(
    cfg: LossConfig, r: torch.Tensor, batch: dict[str, torch.Tensor], nu_raw: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed loss, weight) of one micro-batch, from the rewards `r` of its responses in the layouts' order.

    Under Plackett-Luce a group's ranking is one term (tied responses are not chosen over each other) and, with
    `loss.ties=davidson`, its tied pairs add Davidson's -log P(a = b), averaged over the group's ties, so a tie
    pulls two rewards together as it does under the pairwise loss."""
    groups = len(batch["subset_ids"])
    better, worse, pair_group = batch["better"], batch["worse"], batch["pair_group"]
    davidson = cfg.ties == "davidson"
    tie_group = batch["tie_group"] if davidson else pair_group[:0]
    strict_n = torch.bincount(pair_group, minlength=groups)
    tie_n = torch.bincount(tie_group, minlength=groups)
    per_group = strict_n + tie_n
    nu = None
    if davidson:
        nu = learned_nu(nu_raw) if cfg.davidson_nu == "learned" else float(cfg.davidson_nu)
    center = cfg.center_rewards_coef * (r[better] + r[worse]) ** 2 if cfg.center_rewards_coef else None
    if cfg.type == "plackett_luce":
        loss = plackett_luce_loss(r, batch["response_group"], batch["response_rank"])
        if davidson:
            tw = 1.0 / tie_n.clamp(min=1).to(r.dtype)[tie_group]
            loss = loss + davidson_loss(r, better[:0], worse[:0], batch["tie_a"], batch["tie_b"], nu, tie_weight=tw)
        return loss + (center.sum() if center is not None else 0.0), (per_group > 0).sum()
    if cfg.group_weighting == "group":
        share = 1.0 / per_group.clamp(min=1).to(r.dtype)
        w, tw, weight = share[pair_group], share[tie_group], (per_group > 0).sum()
    else:
        w = torch.ones(len(better), dtype=r.dtype, device=r.device)
        tw, weight = torch.ones(len(tie_group), dtype=r.dtype, device=r.device), per_group.sum()
    margin = batch["pair_margin"].to(r.dtype) if cfg.use_margin else None
    if davidson:
        loss = davidson_loss(r, better, worse, batch["tie_a"], batch["tie_b"], nu, w, tw, margin)
        return loss + ((center * w).sum() if center is not None else 0.0), weight
    # Bradley-Terry, summed as rm/model/loss.py sums it (the centring term added per pair before the sum), so a
    # batch of pairs gives its loss bit for bit.
    diff = r[better] - r[worse]
    if margin is not None:
        diff = diff - margin
    per_pair = -F.logsigmoid(diff)
    if center is not None:
        per_pair = per_pair + center
    return (per_pair * w).sum(), weight
