"""The reward as a fixed mix of the attribute outputs (`model.head.reward_from_attributes`): the config
check, training's forward (column 0 = sum_a w_a * output_a, trained through the mix), and the export, whose row 0
of the score head is that mix, so plain transformers' logits[:, 0] is sum_a w_a * logits[:, 1 + a]."""

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from conftest import QUICKSTART, random_pairs
from rm.collate.padded import PaddedCollator
from rm.config import RandomInitConfig, RunConfig, load_config
from rm.config.head_config import HeadConfig
from rm.config.schema import LossConfig
from rm.errors import ConfigError
from rm.export.folder import ExportOptions, Weights, export_model
from rm.export.outputs import tie_reward_row
from rm.model.build import build_model
from rm.model.objective import training_loss
from rm.model.pretrained import load_reward_model
from rm.model.reward import RewardModel, group_outputs, score_head

NAMES = ["helpfulness", "correctness", "verbosity"]
MIX = {"helpfulness": 0.65, "correctness": 0.8, "verbosity": -0.3}
WEIGHTS = [0.65, 0.8, -0.3]
TEXTS = ["\n\nHuman: what is 2 + 3?\n\nAssistant: 5", "\n\nHuman: hi\n\nAssistant: hello there, how can I help?"]


def mix_config(tmp_path, mix=MIX) -> RunConfig:
    cfg = RunConfig(output_dir=str(tmp_path / "run"))
    cfg.model.head = HeadConfig(attributes=list(NAMES), reward_from_attributes=dict(mix))
    cfg.model.random_init = RandomInitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=64)  # fmt: skip
    return cfg


def mixed_model(cfg: RunConfig, tokenizer):
    torch.manual_seed(5)
    hf = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).eval()
    with torch.no_grad():  # outputs of distinct scales: a weight applied to the wrong column shows
        score_head(hf).weight.mul_(torch.tensor([[1.0], [3.0], [10.0], [30.0]]))
    return hf


def test_mix_names_must_be_attributes_and_overrides_combine_with_the_yaml():
    with pytest.raises(ConfigError, match=r"reward_from_attributes\.honesty: not one of model\.head\.attributes"):
        HeadConfig(attributes=["helpfulness"], reward_from_attributes={"honesty": 1.0})
    with pytest.raises(ConfigError, match="must be a finite number"):
        HeadConfig(attributes=["helpfulness"], reward_from_attributes={"helpfulness": float("nan")})
    cfg = load_config(QUICKSTART, ["model.head.attributes=[a, b]", "model.head.reward_from_attributes={a: 2, b: 0.5}"])
    assert cfg.model.head.reward_from_attributes == {"a": 2.0, "b": 0.5}
    with pytest.raises(ConfigError) as e:
        load_config(QUICKSTART, ["model.head.attributes=[a, b]", "model.head.reward_from_attributes={c: 1}"])
    assert "\n" not in str(e.value) and "reward_from_attributes.c: not one of" in str(e.value)


def test_training_forward_reward_is_the_mix_and_trains_the_attribute_rows(tokenizer, tmp_path):
    hf = mixed_model(mix_config(tmp_path), tokenizer)
    assert hf.config.reward_from_attributes == MIX
    batch = PaddedCollator(tokenizer.pad_token_id)(random_pairs(len(tokenizer), 6, seed=2))
    batch["attributes"] = torch.rand(12, 3) * 4
    out = group_outputs(RewardModel(hf), batch)
    assert out.shape == (12, 4)
    by_hand = torch.tensor([sum(w * float(row[1 + a]) for a, w in enumerate(WEIGHTS)) for row in out.detach()])
    torch.testing.assert_close(out[:, 0].detach(), by_hand, rtol=0, atol=1e-6)
    plain = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # the untied head
    assert (plain[:, 0] - out[:, 0]).abs().max() > 1e-2  # row 0 of the head is not what training reads
    training_loss(LossConfig(attribute_coef=0.0), out, batch)[0].backward()  # the preference term alone
    grad = score_head(hf).weight.grad
    assert (grad[0] == 0).all() and (grad[1:].abs().sum(1) > 0).all()  # through the mix, into rows 1..A


def test_export_row_zero_is_the_mix_in_plain_transformers(tokenizer, tmp_path):
    cfg = mix_config(tmp_path)
    hf = mixed_model(cfg, tokenizer)
    trained = RewardModel(hf)
    full = export_model(hf, tokenizer, tmp_path / "full", cfg, Weights(None, None))
    config = json.loads((full / "config.json").read_text())
    assert config["reward_from_attributes"] == MIX and len(config["id2label"]) == 4
    assert "0.65 * `helpfulness` + 0.8 * `correctness` + -0.3 * `verbosity`" in (full / "README.md").read_text()
    loaded = AutoModelForSequenceClassification.from_pretrained(full).eval()
    batch = AutoTokenizer.from_pretrained(full)(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = loaded(**batch).logits
        mixed = logits[:, 1:].double() @ torch.tensor(WEIGHTS, dtype=torch.float64)
        torch.testing.assert_close(logits[:, 0].double(), mixed, rtol=0, atol=1e-5)
        # what training read as the reward is what the export's logits[:, 0] is, and rm score reads it
        torch.testing.assert_close(trained(**batch)[:, 0], logits[:, 0], rtol=0, atol=1e-5)
        scorer, _ = load_reward_model(str(full))
        torch.testing.assert_close(scorer(**batch)[:, 0], logits[:, 0], rtol=0, atol=1e-6)
    one = export_model(mixed_model(cfg, tokenizer), tokenizer, tmp_path / "one", cfg, Weights(None, None),
                       options=ExportOptions(reward_only=True))  # fmt: skip
    with torch.no_grad():
        single = AutoModelForSequenceClassification.from_pretrained(one).eval()(**batch).logits
    assert single.shape == (2, 1)
    torch.testing.assert_close(single[:, 0], logits[:, 0], rtol=0, atol=1e-5)
    assert "fixed mix reward" in (one / "README.md").read_text()


def test_tie_writes_the_bias_mix_too_and_leaves_a_model_without_mix_alone(tokenizer, tmp_path):
    hf = mixed_model(mix_config(tmp_path), tokenizer)
    biased = torch.nn.Linear(32, 4, bias=True)
    hf.score = biased
    tie_reward_row(hf)
    w = torch.tensor(WEIGHTS)
    torch.testing.assert_close(biased.weight[0], w @ biased.weight[1:], rtol=0, atol=1e-6)
    torch.testing.assert_close(biased.bias[0], w @ biased.bias[1:], rtol=0, atol=1e-6)
    plain = build_model(mix_config(tmp_path, {}).model, len(tokenizer), tokenizer.pad_token_id, None)
    before = score_head(plain).weight.detach().clone()
    tie_reward_row(plain)
    assert torch.equal(score_head(plain).weight, before) and not hasattr(plain.config, "reward_from_attributes")
    assert not hasattr(plain, "rm_reward_mix")
