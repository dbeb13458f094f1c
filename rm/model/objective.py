"""A micro-batch's training loss as `loss.*` asks, and how much weight it carries in its optimizer step.

The loop sums each micro-batch's loss and divides by the weight of the whole step on every process
(rm/collate/shard.py: `step_pairs`), so the update is the same whatever the processes and accumulation steps.
The weight unit is what `loss.group_weighting` makes equal: a group (its comparisons share a weight of 1, as
InstructGPT trained a prompt's C(K,2) comparisons as one element) or a comparison. For pairs both units are
one pair, and the loss is exactly rm/model/group_loss.py:bradley_terry_loss, term for term.

Davidson's tie weight nu, when learned, is a parameter of the reward model (`RewardModel.tie_nu`): trained by
the same optimizer, saved in its checkpoints, and written into the export's config.json as `rm_davidson_nu`.

With `model.head.attributes` the head's outputs 1..A regress each response's scores (`training_loss`):
a group's attribute term is the mean loss over its scored (response, attribute) entries, weighted as the
group's preference term is, so the step normalisation stays exact; a missing score (NaN) adds nothing.
With `loss.strength=soft` a pair with a soft label p (`pair_target`) adds the cross-entropy of p against
sigmoid(d) in place of its Bradley-Terry (or Davidson strict) term (rm/model/group_loss.py:soft_bradley_terry).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from rm.collate.comparisons import comparison_counts
from rm.collate.loss_labels import missing_names
from rm.config.schema import LossConfig, RunConfig
from rm.data import labels
from rm.data.formats.strength import strength_scale
from rm.errors import ConfigError, DataError
from rm.model.group_loss import davidson_loss, learned_nu, plackett_luce_loss, soft_bradley_terry
from rm.model.length.length_head import LengthHead, split_length
from rm.model.length.length_loss import length_terms
from rm.model.reward import step_split
from rm.model.steps.step_loss import check_step_run, step_terms, step_weights
from rm.tokens.store import EncodedGroup, EncodedSplit


def tie_parameter(cfg: LossConfig) -> torch.nn.Parameter | None:
    """The trained scalar behind nu (softplus(0) = 0.69 to start), or None when nu is fixed or ties are skipped."""
    if cfg.ties == "davidson" and cfg.davidson_nu == "learned":
        return torch.nn.Parameter(torch.zeros(()))
    return None


def loss_parameters(cfg: RunConfig) -> tuple[torch.nn.Parameter | None, torch.nn.Parameter | None, float | None]:
    """(Davidson's nu, the attributes' log-scales, the length head's statistics momentum): what the reward model
    keeps for the loss. The log-scales (sigma = exp, 1 to start) exist only for `loss.attribute_loss=gaussian` with
    attributes; the momentum (a length head is built) only with `model.head.length`."""
    gaussian = cfg.loss.attribute_loss == "gaussian" and cfg.model.head.attributes
    scale = torch.nn.Parameter(torch.zeros(len(cfg.model.head.attributes))) if gaussian else None
    return tie_parameter(cfg.loss), scale, cfg.loss.length_stats_momentum if cfg.model.head.length else None


def step_weight(cfg: LossConfig, strict: int, ties: int) -> int:
    """The weight one group with `strict` ordered and `ties` tied pairs adds to its optimizer step (the unit of
    `step_pairs`), as `preference_loss` counts it: ties count only under Davidson, and a group with nothing to
    compare (a tied pair under `ties=skip`) adds nothing."""
    n = strict + (ties if cfg.ties == "davidson" else 0)
    return n if cfg.group_weighting == "pair" and cfg.type == "pairwise" else int(n > 0)


def group_weights(cfg: LossConfig, train: Sequence[EncodedGroup]) -> np.ndarray | None:
    """Each training group's weight in its optimizer step, or None where every group weighs one (pairs, or groups
    under `loss.group_weighting=group` that all have something to compare): what rm/collate/shard.py sums.
    Stepwise groups weigh their steps or solutions (rm/model/steps/step_loss.py)."""
    if isinstance(train, EncodedSplit) and "step_counts" in train.table.schema.names:
        return step_weights(cfg, train)
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
    target = batch.get("pair_target") if cfg.strength == "soft" else None  # [strict pairs], NaN: a hard label
    diff = r[better] - r[worse]
    if margin is not None:
        diff = diff - margin
    if davidson:  # hard pairs by Davidson's strict term, soft ones by the cross-entropy (loss.ties: hard labels)
        strict_w = w if target is None else w * target.isnan()
        loss = davidson_loss(r, better, worse, batch["tie_a"], batch["tie_b"], nu, strict_w, tw, margin)
        if target is not None:
            soft = soft_bradley_terry(diff, target.nan_to_num().to(r.dtype)) * w
            loss = loss + soft[~target.isnan()].sum()
        return loss + ((center * w).sum() if center is not None else 0.0), weight
    # Bradley-Terry, summed as rm/model/group_loss.py:bradley_terry_loss sums it (the centring term added per pair
    # before the sum), so a batch of pairs gives its loss bit for bit.
    per_pair = -F.logsigmoid(diff)
    if target is not None:
        per_pair = torch.where(target.isnan(), per_pair, soft_bradley_terry(diff, target.nan_to_num().to(r.dtype)))
    if center is not None:
        per_pair = per_pair + center
    return (per_pair * w).sum(), weight


def group_step_weights(cfg: LossConfig, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[groups]: each group's weight in its optimizer step, `step_weight` computed from the batch's index tensors."""
    groups = len(batch["subset_ids"])
    n = torch.bincount(batch["pair_group"], minlength=groups)
    if cfg.ties == "davidson":
        n = n + torch.bincount(batch["tie_group"], minlength=groups)
    return n if cfg.group_weighting == "pair" and cfg.type == "pairwise" else (n > 0).long()


def attribute_loss(
    kind: str, pred: torch.Tensor, target: torch.Tensor, entry_weight: torch.Tensor, log_scale: torch.Tensor | None
) -> torch.Tensor:
    """Summed regression loss of `pred` against `target` ([responses, A] each, NaN where a score is missing),
    each entry weighted by `entry_weight` ([responses, A]). mse: (pred - y)^2. gaussian: the negative
    log-likelihood of y under Normal(pred, sigma_a), (pred - y)^2 / (2 sigma_a^2) + log sigma_a + log(2 pi) / 2,
    sigma_a = exp(log_scale[a]) learned per attribute (a scale that says how noisy each rating is)."""
    scored = ~target.isnan()
    error = torch.where(scored, pred - target.nan_to_num(), torch.zeros_like(pred))
    if kind == "gaussian":
        per_entry = 0.5 * (error * torch.exp(-log_scale)) ** 2 + log_scale + 0.5 * math.log(2 * math.pi)
    else:
        per_entry = error**2
    return (per_entry * entry_weight * scored).sum()


def training_loss(
    cfg: LossConfig, out: torch.Tensor, batch: dict[str, torch.Tensor], nu_raw: torch.Tensor | None = None,
    log_scale: torch.Tensor | None = None, length: LengthHead | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(summed loss, weight) of one micro-batch from the head's outputs: rewards [responses] give
    `preference_loss` as it is; [responses, 1 + A] give preference_coef * that of column 0 + attribute_coef *
    the attribute term, each group's entries averaged and weighted as its preference term; and every active
    registered `LossTerm` adds its own. With a `length` head the outputs end in its column
    (rm/model/length/): the preference term ranks reward + length output, and the head's terms are added."""
    out, steps = step_split(out, batch)
    if steps is not None:  # a process reward model (rm/model/steps/step_loss.py)
        loss, weight = step_terms(cfg, steps, batch)
        if cfg.step_preference_coef:
            loss = loss + cfg.step_preference_coef * preference_loss(cfg, out, batch, nu_raw)[0]
        return loss, weight
    lengths = None
    if length is not None:
        out, lengths = split_length(out)
    reward = out if out.dim() == 1 else out[:, 0]
    preference, weight = preference_loss(cfg, reward if lengths is None else reward + lengths, batch, nu_raw)
    loss = preference
    if out.dim() > 1:
        target = batch["attributes"].to(out.dtype)  # [responses, A]
        group = batch["response_group"]
        counts = torch.zeros(len(batch["subset_ids"]), dtype=out.dtype, device=out.device)
        counts.index_add_(0, group, (~target.isnan()).sum(1).to(out.dtype))
        share = group_step_weights(cfg, batch).to(out.dtype) / counts.clamp(min=1)  # [groups]
        entry_weight = share[group][:, None].expand_as(target)
        attributes = attribute_loss(cfg.attribute_loss, out[:, 1:], target, entry_weight, log_scale)
        loss = cfg.preference_coef * preference + cfg.attribute_coef * attributes
    if length is not None:
        loss = loss + length_terms(cfg, reward, lengths, batch, group_step_weights(cfg, batch), length)
    return with_terms(loss, cfg, reward, batch), weight


@dataclass(frozen=True, kw_only=True)
class LossTerm:
    """A term added to every micro-batch's loss, reading labels (rm/data/labels.py) by name from the batch."""

    name: str
    consumes: tuple[str, ...]
    """The labels it reads: a run whose data has no value of one stops after loading, before tokenizing."""
    loss: Callable[[LossConfig, torch.Tensor, dict[str, torch.Tensor], torch.Tensor], torch.Tensor]
    """(loss config, rewards [responses], batch, each group's weight in its step [groups]) -> the summed term,
    its coefficient applied. Weighing each group by the given weight keeps the step's normalisation exact under
    any number of processes and accumulation steps, as the preference term's is."""
    active: Callable[[LossConfig], bool] = lambda cfg: True


_TERMS: dict[str, LossTerm] = {}


def register_loss_term(term: LossTerm) -> LossTerm:
    """Add `term` to training's loss; a name another term has is refused."""
    if _TERMS.get(term.name) not in (None, term):
        raise ConfigError(f"loss term {term.name!r}: the name is taken; choose another")
    known = labels.registered()
    if missing := [name for name in term.consumes if name not in known]:
        raise ConfigError(f"loss term {term.name!r} reads label(s) {', '.join(missing)} that no one registered")
    _TERMS[term.name] = term
    return term


def unregister_loss_term(name: str) -> None:
    _TERMS.pop(name, None)


def with_terms(loss: torch.Tensor, cfg: LossConfig, rewards: torch.Tensor, batch: dict) -> torch.Tensor:
    """`loss` plus every active registered term on this micro-batch (`loss` itself, untouched, with none)."""
    active = [term for term in _TERMS.values() if term.active(cfg)]
    if not active:
        return loss
    weights = group_step_weights(cfg, batch).to(rewards.dtype)
    return loss + sum(term.loss(cfg, rewards, batch, weights) for term in active)


def check_consumed(cfg: RunConfig, counts: dict[str, dict]) -> None:
    """Refuse, in one line, a run whose loss or head reads a label its data has no value of (`counts`: the data
    report's `labels`, as loading found them; derived labels are always there): soft labels without a strength,
    an attribute no response has (unless a key of the data misspells it: rm/collate/loss_labels.py names that
    record after the cache), a registered term's label. Called after loading, before anything is tokenized."""
    check_step_run(cfg, counts)
    if cfg.loss.strength == "soft":
        found = counts.get("strength", {"items": 0, "max_abs": 0.0})
        strength_scale(found["items"], found["max_abs"], cfg.loss.strength_max)
    if cfg.model.head.attributes:
        missing_names(cfg.model.head.attributes, counts.get("attributes", {"names": {}}), misspelt_later=True)
    for term in _TERMS.values():
        for name in term.consumes if term.active(cfg.loss) else ():
            label = labels.registered()[name]
            if label.read is not None and not counts.get(name, {}).get("items"):
                raise DataError(f"loss term {term.name!r} reads label {name!r}, which no record has ({label.fields})")
