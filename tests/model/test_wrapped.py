"""rm's reward head on causal LMs transformers has no sequence-classification class for: the same behaviour as
native classes (checkpoints, LoRA, gradient checkpointing, loading), and one-line errors for non-decoders."""

import pytest
import torch
from transformers import AutoModelForCausalLM, GraniteConfig

from conftest import QUICKSTART, REPO, random_pairs
from rm.collate.padded import PaddedCollator
from rm.config import LoraConfig, ModelConfig, RandomInitConfig, load_config
from rm.errors import ConfigError, ModelError
from rm.model.build import build_model
from rm.model.group_loss import bradley_terry_loss
from rm.model.reward import RewardModel, pair_rewards

GRANITE = RandomInitConfig(
    model_type="granite", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
)


def granite(tokenizer, **model_cfg):
    torch.manual_seed(0)
    cfg = ModelConfig(random_init=GRANITE, **model_cfg)
    return build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)


def test_random_init_config_takes_extra_keys_from_yaml_and_overrides():
    cfg = load_config(QUICKSTART, ["model.random_init.config={sliding_window: 16, num_experts: 4}"])
    assert cfg.model.random_init.config == {"sliding_window": 16, "num_experts": 4}
    cfg = load_config(QUICKSTART, ["model.random_init.config.layer_types=[sliding_attention, full_attention]"])
    assert cfg.model.random_init.config == {"layer_types": ["sliding_attention", "full_attention"]}
    with pytest.raises(ConfigError, match="model.random_init.config.rope"):
        load_config(QUICKSTART, ["model.random_init.config={rope: {type: x}}"])


@pytest.mark.parametrize(
    ("model_type", "says"),
    [
        ("t5", "model_type 't5' is an encoder-decoder; rm trains decoder-only causal LMs"),
        ("vit", "model_type 'vit' is neither a causal LM nor a sequence classifier"),
        ("no_such_model", "model.random_init (model_type 'no_such_model')"),
    ],
)
def test_models_that_are_not_causal_decoders_get_one_line(tokenizer, model_type, says):
    shape = RandomInitConfig(model_type=model_type, hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
    with pytest.raises(ConfigError) as e:
        build_model(ModelConfig(random_init=shape), len(tokenizer), tokenizer.pad_token_id, None)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_cli_names_the_model_type_in_one_line(tmp_path):
    import subprocess
    import sys

    from conftest import TINY

    cmd = [sys.executable, "-m", "rm", "train", str(QUICKSTART), *TINY, "model.random_init.model_type=t5"]
    proc = subprocess.run(cmd + [f"output_dir={tmp_path}"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: model.random_init.model_type: model_type 't5' is an encoder-decoder"), last
    assert "Traceback" not in proc.stderr


def test_a_causal_lm_checkpoint_loads_into_the_head_with_its_backbone_weights(tokenizer, tmp_path):
    """What a Hub name of such an architecture resolves to: a causal-LM folder. Its backbone carries over."""
    lm = AutoModelForCausalLM.from_config(
        GraniteConfig(
            vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
        )
    )
    lm.save_pretrained(tmp_path / "lm")
    model = build_model(ModelConfig(name_or_path=str(tmp_path / "lm")), len(tokenizer), tokenizer.pad_token_id, None)
    assert type(model).__name__ == "GraniteForSequenceClassification" and model.config.num_labels == 1
    assert type(model).__module__ == "rm.model.architecture"
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(model.model.state_dict()[name], tensor), name
    assert model.score.weight.shape == (1, 32)
    with pytest.raises(ModelError, match="encoder-decoder"):
        from transformers import T5Config

        T5Config(d_model=32, num_layers=1, num_heads=4, d_ff=64).save_pretrained(tmp_path / "t5")
        build_model(ModelConfig(name_or_path=str(tmp_path / "t5")), len(tokenizer), 0, None)


@pytest.mark.slow
def test_lora_on_the_head_trains_adapters_and_score_and_merges(tokenizer):
    from rm.export.folder import merged
    from rm.model.lora import add_lora

    hf = granite(tokenizer)
    model = RewardModel(add_lora(hf, LoraConfig(r=4)))
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n or "score" in n for n in trained)
    batch = PaddedCollator(tokenizer.pad_token_id)(random_pairs(len(tokenizer), 4, seed=0))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):
        loss = bradley_terry_loss(*pair_rewards(model, batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        want = torch.cat(pair_rewards(model, batch))
        plain, lora = merged(model.hf)
        got = torch.cat(pair_rewards(RewardModel(plain).eval(), batch))
    assert type(plain).__name__ == "GraniteForSequenceClassification" and lora["r"] == 4
    assert (got - want).abs().max().item() <= 1e-5


@pytest.mark.parametrize("model_type", ["granite", "mamba"])
@pytest.mark.slow
def test_gradient_checkpointing_on_the_head_gives_the_same_gradients(tokenizer, model_type):
    shape = RandomInitConfig(
        model_type=model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    batch = PaddedCollator(tokenizer.pad_token_id)(random_pairs(len(tokenizer), 3, seed=1))
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        hf = build_model(
            ModelConfig(random_init=shape, gradient_checkpointing=checkpointing), len(tokenizer), 0, None
        ).train()
        assert hf.is_activation_checkpointing == checkpointing
        loss = bradley_terry_loss(*pair_rewards(RewardModel(hf), batch), center_rewards_coef=0.1)
        loss.backward()
        grads.append({n: p.grad for n, p in hf.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name, g in grads[0].items():
        assert torch.allclose(grads[1][name], g, atol=1e-6), name


def test_rm_loads_a_wrapped_export_without_remote_code(tokenizer, tmp_path):
    """`rm score` / `rm eval` (load_reward_model) build rm's own class; the exported file never runs."""
    from transformers import AutoModelForSequenceClassification

    from rm.config import RunConfig
    from rm.export.folder import Weights, export_model
    from rm.model.pretrained import load_reward_model

    hf = granite(tokenizer).eval()
    out = export_model(hf, tokenizer, tmp_path / "export", RunConfig(), Weights(None, None))
    # Loading it with remote code registers the file's class for GraniteConfig in this process's Auto
    # mapping; rm must go on using its own class all the same.
    AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    (out / "modeling_rm_reward.py").write_text("raise RuntimeError('remote code ran')\n")  # must not be needed
    model, _ = load_reward_model(str(out), trust_remote_code=False)
    assert type(model.hf).__module__ == "rm.model.architecture"
    assert type(granite(tokenizer)).__module__ == "rm.model.architecture"
    batch = PaddedCollator(tokenizer.pad_token_id)(random_pairs(len(tokenizer), 4, seed=2))
    with torch.no_grad():
        got, want = torch.cat(pair_rewards(model, batch)), torch.cat(pair_rewards(RewardModel(hf), batch))
    assert (got - want).abs().max().item() <= 1e-6
