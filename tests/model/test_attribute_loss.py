"""Attribute outputs beside the reward: the head of 1 + A outputs (reward at index 0, as a one-output
model's), and the masked regression loss (mse, Gaussian NLL with a learned scale) against a computation by hand,
weighted per group as the preference term; a model and loss without attributes are exactly the old ones."""

import math

import pytest
import torch

from conftest import tiny_model
from rm.collate.padded import PaddedCollator
from rm.config import ModelConfig, RandomInitConfig, RunConfig
from rm.config.head_config import HeadConfig
from rm.config.schema import LossConfig
from rm.model.build import build_model
from rm.model.objective import loss_parameters, preference_loss, training_loss
from rm.model.reward import RewardModel, group_outputs, group_rewards, score_head
from rm.tokens.store import EncodedGroup

NAN = math.nan


def groups() -> list[EncodedGroup]:
    """A pair (A = 2) with one missing score; a group of 3; a tied pair (no comparison under ties=skip)."""
    return [
        EncodedGroup([5], [[6], [7]], [0, 1], 0, attributes=[3.0, NAN, 1.0, 2.0]),
        EncodedGroup([5, 8], [[6], [7, 7], [9]], [0, 1, 2], 0, attributes=[4.0, 0.0, NAN, NAN, 1.0, 3.0]),
        EncodedGroup([4], [[6], [7]], [0, 0], 0, attributes=[2.0, 2.0, 2.0, 2.0]),
    ]


def hand_attribute_term(kind: str, out: torch.Tensor, batch: dict, log_scale=(0.0, 0.0), pair_weighting=False):
    """sum over groups of w_g * mean over the group's scored entries of the entry loss, in plain Python."""
    entries: dict[int, list[float]] = {}
    for n, g in enumerate(batch["response_group"].tolist()):
        for a in range(2):
            y = float(batch["attributes"][n, a])
            if math.isnan(y):
                continue
            mu = float(out[n, 1 + a])
            if kind == "mse":
                loss = (mu - y) ** 2
            else:
                s = math.exp(log_scale[a])
                loss = (mu - y) ** 2 / (2 * s * s) + math.log(s) + 0.5 * math.log(2 * math.pi)
            entries.setdefault(g, []).append(loss)
    strict = [int((batch["pair_group"] == g).sum()) for g in range(3)]
    weights = strict if pair_weighting else [int(n > 0) for n in strict]
    return sum(weights[g] * sum(v) / len(v) for g, v in entries.items())


@pytest.fixture
def batch_and_outputs():
    batch = PaddedCollator(0)(groups())
    out = torch.tensor(
        [[0.3, 2.5, 1.0], [0.1, 3.0, -1.0], [-0.2, 0.0, 0.5], [0.4, 1.5, 2.5],
         [0.0, 0.5, 0.5], [0.2, 2.0, 1.0], [0.6, 1.0, 3.5]],
        dtype=torch.float64,
    )  # fmt: skip
    return batch, out


@pytest.mark.parametrize("weighting", ["group", "pair"])
@pytest.mark.parametrize("coefs", [(1.0, 1.0), (0.0, 2.0), (0.5, 0.0)])
def test_mse_loss_is_the_weighted_sum_worked_out_by_hand(batch_and_outputs, weighting, coefs):
    batch, out = batch_and_outputs
    cfg = LossConfig(group_weighting=weighting, preference_coef=coefs[0], attribute_coef=coefs[1])
    loss, weight = training_loss(cfg, out, batch)
    preference, pref_weight = preference_loss(cfg, out[:, 0], batch)
    want = coefs[0] * float(preference) + coefs[1] * hand_attribute_term(
        "mse", out, batch, pair_weighting=weighting == "pair"
    )
    assert float(loss) == pytest.approx(want, rel=1e-12)
    assert int(weight) == int(pref_weight) == (2 if weighting == "group" else 4)


def test_gaussian_nll_with_learned_scales_matches_by_hand(batch_and_outputs):
    batch, out = batch_and_outputs
    log_scale = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    cfg = LossConfig(attribute_loss="gaussian", preference_coef=0.0)
    loss, _ = training_loss(cfg, out, batch, log_scale=log_scale)
    assert float(loss.detach()) == pytest.approx(hand_attribute_term("gaussian", out, batch, (0.3, -0.7)), rel=1e-12)
    loss.backward()
    assert log_scale.grad is not None and log_scale.grad.abs().sum() > 0


def test_a_missing_score_gives_its_output_no_gradient(batch_and_outputs):
    batch, out = batch_and_outputs
    out = out.clone().requires_grad_(True)
    training_loss(LossConfig(preference_coef=0.0), out, batch)[0].backward()
    missing = batch["attributes"].isnan()
    assert missing.any() and (out.grad[:, 1:][missing] == 0).all()
    assert (out.grad[:, 1:][~missing] != 0).sum() > 0
    assert (out.grad[:, 0] == 0).all()  # preference_coef 0: the reward output is not trained


@pytest.mark.parametrize("kind", ["mse", "gaussian"])
@pytest.mark.parametrize("davidson", [False, True])
def test_the_data_bounds_keep_a_float32_micro_batch_finite(kind, davidson):
    """16 groups (the micro-batch whose step was skipped) at every bound the parsers allow: pairs with margin
    1e30, a group of 4 scored ±5e29 (margins up to 1e30), attributes ±1e15, with a fresh head's outputs (0):
    the loss and every gradient are finite in float32. One attribute of 1e20 (float32's check alone passed it)
    makes the same loss infinite: (0 - 1e20)^2 = 1e40."""
    from rm.data.formats.pair import ATTRIBUTE_MAX, MARGIN_MAX, SCORE_MAX

    top = [ATTRIBUTE_MAX, -ATTRIBUTE_MAX]
    pairs = [EncodedGroup([5], [[6], [7]], [0, 1], 0, margin=MARGIN_MAX, attributes=top * 2) for _ in range(15)]
    scores = [SCORE_MAX, SCORE_MAX / 3, -SCORE_MAX / 3, -SCORE_MAX]
    group = EncodedGroup([5], [[6], [7], [8], [9]], [0, 1, 2, 3], 0, scores=scores, attributes=top * 4)
    batch = PaddedCollator(0)(pairs + [group])
    out = torch.zeros(len(batch["response_group"]), 3, requires_grad=True)  # float32, as training computes it
    log_scale = torch.zeros(2, requires_grad=True) if kind == "gaussian" else None
    ties = {"ties": "davidson", "davidson_nu": 0.5} if davidson else {}
    cfg = LossConfig(use_margin=True, group_weighting="pair", attribute_loss=kind, **ties)
    loss, _ = training_loss(cfg, out, batch, log_scale=log_scale)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(out.grad).all()
    assert float(batch["pair_margin"].abs().max()) == pytest.approx(MARGIN_MAX, rel=1e-6)  # float32 rounding
    batch["attributes"][0, 0] = 1e20
    assert not torch.isfinite(training_loss(cfg, out.detach(), batch, log_scale=log_scale)[0])


def test_without_attributes_the_loss_is_preference_loss_itself(batch_and_outputs):
    batch, out = batch_and_outputs
    r = out[:, 0].clone()
    for cfg in (LossConfig(), LossConfig(ties="davidson", davidson_nu=0.5), LossConfig(type="plackett_luce")):
        a, b = training_loss(cfg, r, batch), preference_loss(cfg, r, batch)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    cfg = RunConfig()
    assert loss_parameters(cfg)[1] is None
    cfg.model.head.attributes, cfg.loss.attribute_loss = ["a", "b"], "gaussian"
    assert loss_parameters(cfg)[1].shape == (2,)


def test_the_head_has_one_plus_a_outputs_and_output_0_is_the_reward(tokenizer):
    shape = RandomInitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    cfg = ModelConfig(random_init=shape, head=HeadConfig(attributes=["helpfulness", "verbosity"]))
    torch.manual_seed(0)
    hf = build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).eval()
    assert score_head(hf).out_features == 3 and hf.config.num_labels == 3
    assert hf.config.id2label == {0: "reward", 1: "helpfulness", 2: "verbosity"}
    one = tiny_model(tokenizer)  # the same seed and shape, one output: the model of a run without attributes
    assert score_head(one).out_features == 1 and one.config.num_labels == 1
    hf.load_state_dict({k: v for k, v in one.state_dict().items() if "score" not in k}, strict=False)
    with torch.no_grad():
        score_head(hf).weight[0] = score_head(one).weight[0]
    batch = PaddedCollator(tokenizer.pad_token_id)(groups())
    with torch.no_grad():
        out = group_outputs(RewardModel(hf), batch)
        plain = group_rewards(RewardModel(one), batch)
    assert out.shape == (7, 3) and plain.shape == (7,)
    assert torch.equal(group_rewards(RewardModel(hf), batch), out[:, 0])
    torch.testing.assert_close(out[:, 0], plain, rtol=0, atol=1e-6)


def test_lora_trains_the_whole_extended_head(tokenizer):
    from rm.config.schema import LoraConfig
    from rm.model.lora import add_lora

    shape = RandomInitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    cfg = ModelConfig(random_init=shape, head=HeadConfig(attributes=["helpfulness", "verbosity"]))
    hf = build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model = RewardModel(add_lora(hf, LoraConfig(r=4)))
    head = score_head(model.hf)
    trained = [p for p in head.parameters() if p.requires_grad]
    assert [tuple(p.shape) for p in trained] == [(3, 32)]
    out = group_outputs(model, PaddedCollator(tokenizer.pad_token_id)(groups()))
    training_loss(LossConfig(), out, PaddedCollator(tokenizer.pad_token_id)(groups()))[0].backward()
    assert trained[0].grad is not None and (trained[0].grad.abs().sum(1) > 0).all()  # reward and both attributes
