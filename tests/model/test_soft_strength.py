"""Preference strength as soft labels: the cross-entropy of a target p against sigmoid(d), worked out by
hand; p = 1 is the hard Bradley-Terry loss; p = 0.5 at d = 0 is log 2; hard pairs in a soft batch (NaN) keep their
Bradley-Terry or Davidson terms; a soft label reaches the batch only from groups that have one."""

import math

import pytest
import torch

from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.config import RunConfig
from rm.config.loss_config import LossConfig
from rm.config.schema import validate
from rm.errors import ConfigError
from rm.model.group_loss import soft_bradley_terry
from rm.model.objective import preference_loss
from rm.tokens.store import EncodedGroup

NAN = math.nan
SOFT = LossConfig(strength="soft")


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x))


def hand(d: float, p: float) -> float:
    return -(p * log_sigmoid(d) + (1 - p) * log_sigmoid(-d))


def test_soft_term_equals_hand_computation():
    d, p = [0.3, -1.2, 2.0, 0.0], [0.8, 0.5, 1 / 6, 0.5]
    got = soft_bradley_terry(torch.tensor(d, dtype=torch.float64), torch.tensor(p, dtype=torch.float64))
    assert got.tolist() == pytest.approx([hand(a, b) for a, b in zip(d, p, strict=True)], abs=1e-6)
    assert float(got[3]) == pytest.approx(math.log(2), abs=1e-6)  # p = 0.5 at d = 0
    # p = 1: exactly the hard Bradley-Terry term -log sigmoid(d)
    hard = soft_bradley_terry(torch.tensor(d, dtype=torch.float64), torch.ones(4, dtype=torch.float64))
    assert hard.tolist() == pytest.approx([-log_sigmoid(a) for a in d], abs=1e-12)


def pairs(targets: list[float]) -> list[EncodedGroup]:
    return [EncodedGroup([5], [[6 + i], [7 + i]], [0, 1], 0, margin=0.25 * i, target=t) for i, t in enumerate(targets)]


def rewards(batch: dict) -> torch.Tensor:
    """Fixed rewards, one per response in the batch's reward order."""
    return torch.tensor([0.7, -0.4, 1.1, 0.2, -0.3, 0.9][: len(batch["response_group"])], dtype=torch.float64)


@pytest.mark.parametrize("use_margin", [False, True])
def test_soft_batch_loss_is_the_sum_of_hand_terms(use_margin):
    """A hard pair (NaN), p = 0.9 and p = 0.5 in one batch: each term by hand, weighted 1 per pair."""
    batch = PaddedCollator(0)(pairs([NAN, 0.9, 0.5]))
    r = rewards(batch)
    loss, weight = preference_loss(LossConfig(strength="soft", use_margin=use_margin), r, batch)
    expected = 0.0
    for k, (b, w) in enumerate(zip(batch["better"].tolist(), batch["worse"].tolist(), strict=True)):
        d = float(r[b] - r[w]) - (0.25 * k if use_margin else 0.0)
        p = float(batch["pair_target"][k])
        expected += -log_sigmoid(d) if math.isnan(p) else hand(d, p)
    assert float(loss) == pytest.approx(expected, abs=1e-6) and int(weight) == 3


def test_targets_of_one_equal_the_hard_loss_and_none_ignores_them():
    batch = PaddedCollator(0)(pairs([1.0, 1.0, 1.0]))
    r = rewards(batch)
    soft, _ = preference_loss(SOFT, r, batch)
    hard, _ = preference_loss(LossConfig(), r, {k: v for k, v in batch.items() if k != "pair_target"})
    assert float(soft) == pytest.approx(float(hard), abs=1e-6)
    ignored, _ = preference_loss(LossConfig(), r, PaddedCollator(0)(pairs([0.5, 0.5, 0.5])))  # strength: none
    assert float(ignored) == float(hard)


def test_davidson_keeps_hard_pairs_and_ties_soft_pairs_take_the_cross_entropy():
    groups = [*pairs([NAN, 0.75]), EncodedGroup([4], [[8], [9]], [0, 0], 0)]  # + a hard tie
    batch = PaddedCollator(0)(groups)
    r = rewards(batch)
    cfg = LossConfig(strength="soft", ties="davidson", davidson_nu=1.0)
    loss, weight = preference_loss(cfg, r, batch)

    def log_norm(d):  # log(e^(d/2) + e^(-d/2) + nu), nu = 1
        return math.log(math.exp(d / 2) + math.exp(-d / 2) + 1.0)

    b, w = batch["better"].tolist(), batch["worse"].tolist()
    d0, d1 = float(r[b[0]] - r[w[0]]), float(r[b[1]] - r[w[1]])
    dt = float(r[batch["tie_a"][0]] - r[batch["tie_b"][0]])
    expected = (log_norm(d0) - d0 / 2) + hand(d1, 0.75) + (log_norm(dt) - math.log(1.0))
    assert float(loss) == pytest.approx(expected, abs=1e-6) and int(weight) == 3


def test_pair_target_reaches_every_layout_only_when_a_group_has_one():
    groups = pairs([0.9, NAN])
    for collator in (PaddedCollator(0), SharedCollator(0, 64)):
        batch = collator(groups)
        assert batch["pair_target"][0].item() == pytest.approx(0.9) and math.isnan(batch["pair_target"][1].item())
        assert "pair_target" not in collator(pairs([NAN, NAN]))


def test_soft_labels_need_the_pairwise_loss():
    cfg = RunConfig()
    cfg.loss.strength, cfg.loss.type = "soft", "plackett_luce"
    with pytest.raises(ConfigError, match="loss.strength"):
        validate(cfg)
    cfg.loss.type, cfg.loss.strength_max = "pairwise", -1.0
    with pytest.raises(ConfigError, match="loss.strength_max"):
        validate(cfg)
