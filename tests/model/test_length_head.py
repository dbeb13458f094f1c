"""The length head (model.head.length, rm/model/length/): token counts in every layout, its terms over ordered pairs'
differences against a hand computation and against the correlations by torch.corrcoef, a marker-only reward left
alone, the same gradient whether a batch is one micro-batch or two, with ties, Plackett-Luce and attribute outputs,
and the config's refusals."""

import math

import pytest
import torch
from test_objective import groups

from conftest import random_pairs, tiny_model
from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator
from rm.config import load_config
from rm.config.schema import LossConfig
from rm.errors import ConfigError
from rm.model.length import length_head
from rm.model.length.length_head import QUALITY_SCALE, LengthHead
from rm.model.length.length_loss import length_terms, response_tokens
from rm.model.objective import group_step_weights, preference_loss, training_loss
from rm.model.reward import RewardModel, group_outputs
from rm.tokens.store import EncodedGroup


@pytest.mark.parametrize("collator", [PaddedCollator(0), SharedCollator(0, 64), PackedCollator(0, 48)])
def test_token_counts_are_the_responses_lengths_in_every_layout(collator):
    data = groups() + random_pairs(50, 6, seed=1)
    batch = collator(data)
    want = [len(data[g].response_ids[k]) for g, k in zip(batch["response_group"], batch["response_slot"], strict=True)]
    assert response_tokens(batch).tolist() == want


def stated_head(moments: list[float], updates: int = 1, orthogonality: float = 0.3) -> LengthHead:
    head = LengthHead(torch.zeros(1, 4), momentum=0.5)
    head.moments.copy_(torch.tensor(moments, dtype=torch.float64))
    head.updates.fill_(updates)
    head.orthogonality = torch.tensor(orthogonality, dtype=torch.float64)
    return head


MOMENTS = [0.2, -0.1, 1.5, 1.0, 0.5, 3.0, 0.6, 0.1]  # of pair differences: E dq, E dl, E dn, E dq^2, ... E dl dn


def hand_terms(cfg: LossConfig, q, lo, n, batch, w, updates: int = 1) -> float:
    """The terms by hand: every ordered pair's differences, its group's weight shared among the group's pairs."""
    m = MOMENTS
    mean = m[:3]
    var = [max(m[3 + i] - mean[i] ** 2, 1e-8) for i in range(3)]
    std = [math.sqrt(var[0] + QUALITY_SCALE**2), math.sqrt(var[1]), math.sqrt(var[2])]
    rho = [max(-1.0, min(1.0, (m[6 + i] - mean[i] * mean[2]) / (std[i] * std[2]))) for i in range(2)]
    pairs = list(zip(batch["better"].tolist(), batch["worse"].tolist(), batch["pair_group"].tolist(), strict=True))
    total = cfg.length_orth_coef * 0.3 * sum(w)
    for b, k, g in pairs:
        v = w[g] / sum(1 for p in pairs if p[2] == g)
        zq, zl = (q[b] - q[k] - mean[0]) / std[0], (lo[b] - lo[k] - mean[1]) / std[1]
        zn = (n[b] - n[k] - mean[2]) / std[2]
        p_l = zl * zn - rho[1] / 2 * (zl * zl - var[1] / std[1] ** 2)
        p_q = zq * zn - rho[0] / 2 * (zq * zq - var[0] / std[0] ** 2)
        corr = (1 - p_l) + rho[0] * (p_q - rho[0] / 2) if updates else 0.0
        total += v * cfg.length_corr_coef * corr
    return total


@pytest.mark.parametrize("updates", [0, 1])
@pytest.mark.parametrize("weighting", ["group", "pair"])
def test_the_terms_match_a_hand_computation(weighting, updates):
    cfg = LossConfig(group_weighting=weighting, length_corr_coef=0.7, length_orth_coef=2.0)
    batch = PaddedCollator(0)(groups())
    torch.manual_seed(0)
    q, lo = torch.randn(2, len(batch["response_group"]), dtype=torch.float64)
    n = response_tokens(batch).double()
    w = group_step_weights(cfg, batch).double()
    got = length_terms(cfg, q, lo, batch, w, stated_head(MOMENTS, updates))
    want = hand_terms(cfg, q.tolist(), lo.tolist(), n.tolist(), batch, w.tolist(), updates)
    assert got.item() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("scale", [0.0, 0.5])
def test_at_the_batchs_own_statistics_the_gradient_is_that_of_the_pairs_correlations(scale, monkeypatch):
    """Pairs under group weighting: every pair weighs 1, so the running statistics set to the batch's own moments
    of the pair differences make the term's value and gradient those of 1 - corr(dl, dn) + corr(dq, dn)^2 / 2,
    taken by torch.corrcoef (the quality deviation with `scale` added in quadrature)."""
    monkeypatch.setattr(length_head, "QUALITY_SCALE", scale)
    batch = PaddedCollator(0)(random_pairs(50, 8, seed=2))
    n = response_tokens(batch).double()
    better, worse = batch["better"], batch["worse"]
    torch.manual_seed(1)
    q = (torch.randn(len(n), dtype=torch.float64) + 0.1 * n).requires_grad_()
    lo = torch.randn(len(n), dtype=torch.float64).requires_grad_()
    x = torch.stack([q.detach()[better] - q.detach()[worse], lo.detach()[better] - lo.detach()[worse]])
    dn = n[better] - n[worse]
    x = torch.cat([x, dn[None]])
    moments = [*x.mean(1), *(x * x).mean(1), *(x[:2] * dn).mean(1)]
    cfg = LossConfig(length_orth_coef=0.0)
    weights = group_step_weights(cfg, batch).double()
    got = length_terms(cfg, q, lo, batch, weights, stated_head([float(v) for v in moments])) / weights.sum()
    got.backward()
    q2, l2 = q.detach().clone().requires_grad_(), lo.detach().clone().requires_grad_()
    dq, dl = q2[better] - q2[worse], l2[better] - l2[worse]
    cov = ((dq - dq.mean()) * (dn - dn.mean())).mean()
    rho_q = cov / ((dq.var(correction=0) + scale**2).sqrt() * dn.std(correction=0))
    rho_l = torch.corrcoef(torch.stack([dl, dn]))[0, 1]
    want = (1 - rho_l) + rho_q**2 / 2
    want.backward()
    assert got.item() == pytest.approx(want.item(), rel=1e-9)
    torch.testing.assert_close(q.grad, q2.grad, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(lo.grad, l2.grad, rtol=1e-9, atol=1e-12)


def test_a_reward_that_ranks_by_the_marker_alone_is_not_penalised():
    """Every pair's quality difference the same (what a marker-only reward gives, however the better answer's
    length goes): no gradient on the quality output from the correlation term."""
    batch = PaddedCollator(0)(random_pairs(50, 8, seed=2))
    q = torch.zeros(len(batch["response_group"]), dtype=torch.float64)
    q[batch["better"]] = 1.5
    q.requires_grad_()
    lo = torch.randn(len(q), dtype=torch.float64)
    n = response_tokens(batch).double()
    dn = n[batch["better"]] - n[batch["worse"]]
    x = torch.stack([torch.full_like(dn, 1.5), lo[batch["better"]] - lo[batch["worse"]], dn])
    moments = [float(v) for v in [*x.mean(1), *(x * x).mean(1), *(x[:2] * dn).mean(1)]]
    cfg = LossConfig(length_orth_coef=0.0)
    length_terms(cfg, q, lo, batch, group_step_weights(cfg, batch).double(), stated_head(moments)).backward()
    assert q.grad.abs().max().item() < 1e-12


def step_gradients(cfg: LossConfig, data: list[EncodedGroup], parts: list[list[int]], collator):
    """Gradients of one optimizer step's loss (summed over micro-batches `parts`, divided by the step's weight, as
    the loop does), and the length head's running moments after the step's update."""
    torch.manual_seed(0)
    hf = tiny_model(_Vocab(), seed=4)
    model = RewardModel(hf, length_momentum=0.5).double().train()
    model.length_head.moments.copy_(torch.tensor(MOMENTS, dtype=torch.float64))
    model.length_head.updates.fill_(1)
    batches = [collator([data[i] for i in part]) for part in parts]
    total = sum(group_step_weights(cfg, b).sum() for b in batches)
    for b in batches:
        loss, _ = training_loss(cfg, group_outputs(model, b, length=True), b, length=model.length_head)
        (loss / total).backward()
    model.update_length_stats(lambda t: t)
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return grads, model.length_head.moments.clone()


class _Vocab:
    """What tiny_model reads of a tokenizer."""

    pad_token_id, eos_token_id = 0, 1

    def __len__(self) -> int:
        return 60


LOSSES = {
    "pairwise": LossConfig(),
    "davidson": LossConfig(ties="davidson", davidson_nu=0.5),
    "plackett_luce": LossConfig(type="plackett_luce"),
}


@pytest.mark.parametrize("layout", ["padded", "shared"])
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_two_micro_batches_give_the_gradient_of_the_whole_batch(loss, layout):
    cfg = LOSSES[loss]
    data = groups() + random_pairs(50, 6, seed=3)
    collator = PaddedCollator(0) if layout == "padded" else SharedCollator(0, 64)
    whole, moments = step_gradients(cfg, data, [list(range(len(data)))], collator)
    split, split_moments = step_gradients(cfg, data, [[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9]], collator)
    assert "length_head.linear.weight" in whole and whole.keys() == split.keys()
    for k in whole:
        torch.testing.assert_close(split[k], whole[k], rtol=1e-5, atol=1e-6)  # the outputs are fp32
    torch.testing.assert_close(split_moments, moments, rtol=1e-9, atol=1e-9)
    assert not torch.equal(moments, torch.tensor(MOMENTS, dtype=torch.float64))  # the step moved them


def test_with_attribute_outputs_the_terms_add_to_the_attribute_loss():
    """Reward, two attributes and the length output: the loss is that of the attribute model on reward + length
    for the preference term, plus the length terms."""
    cfg = LossConfig(attribute_coef=0.5)
    data = [EncodedGroup([5], [[6], [7, 8]], [0, 1], 0, index=i, attributes=[1.0, 2.0, 3.0, float("nan")])
            for i in range(3)]  # fmt: skip
    batch = PaddedCollator(0)(data)
    hf = tiny_model(_Vocab(), seed=5)
    hf.score = torch.nn.Linear(hf.score.in_features, 3, bias=False)
    model = RewardModel(hf, length_momentum=0.5).double().train()
    model.length_head.moments.copy_(torch.tensor(MOMENTS, dtype=torch.float64))
    model.length_head.updates.fill_(1)
    out = group_outputs(model, batch, length=True)
    assert out.shape == (6, 4)
    torch.testing.assert_close(out[:, :3], group_outputs(model, batch))  # the forward without it is untouched
    got, weight = training_loss(cfg, out, batch, length=model.length_head)
    preference, _ = preference_loss(cfg, out[:, 0] + out[:, 3], batch)
    plain, _ = training_loss(cfg, out[:, :3], batch)
    attribute = plain - preference_loss(cfg, out[:, 0], batch)[0]
    weights = group_step_weights(cfg, batch).double()
    terms = length_terms(cfg, out[:, 0], out[:, 3], batch, weights, stated_head(MOMENTS, 1, 0.0))
    terms = terms + cfg.length_orth_coef * model.length_head.orthogonality * weights.sum()
    torch.testing.assert_close(got.double(), (preference + attribute + terms).double(), rtol=1e-6, atol=1e-6)
    assert weight == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["loss.length_stats_momentum=0"], "loss.length_stats_momentum: must be in (0, 1]"),
        (["model.head.length=true", "model.head.attributes=[length]"], "'length' names the length head's output"),
        (["model.head.length=true", "loss.preference_coef=0", "model.head.attributes=[a]"], "model.head.length:"),
        (["loss.length_corr_coef=-1"], "loss.length_corr_coef: must be >= 0"),
    ],
)
def test_what_the_length_head_cannot_train_with_is_refused_in_one_line(overrides, message):
    from conftest import QUICKSTART

    with pytest.raises(ConfigError) as caught:
        load_config(QUICKSTART, overrides)
    assert message in str(caught.value)
    assert len([line for line in str(caught.value).splitlines() if message in line]) == 1
