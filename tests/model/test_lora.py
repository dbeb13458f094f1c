"""LoRA through peft (adapters trained, backbone frozen, score head trained in full), gradient
checkpointing, precision choice, and QLoRA's guard where it cannot run."""

import json

import pytest
import torch
from accelerate.utils import set_seed
from safetensors.torch import load_file
from transformers import AutoTokenizer

from conftest import REPO, TINY_MODEL, plain_transformers_rewards, random_pairs, tiny_model
from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.config import LoraConfig, ModelConfig, RandomInitConfig, load_config
from rm.data.load import load_pairs
from rm.errors import ConfigError
from rm.export.folder import export_run
from rm.model.build import build_model
from rm.model.group_loss import bradley_terry_loss
from rm.model.lora import add_lora, backbone_linear_names, qlora_unavailable, require_qlora
from rm.model.reward import RewardModel, pair_rewards
from rm.training.accelerator import mixed_precision
from rm.training.run import main

QUICKSTART = REPO / "configs" / "quickstart.yaml"


def lora_model(tokenizer, targets=(), r=4):
    hf = tiny_model(tokenizer, seed=3)
    peft_model = add_lora(hf, LoraConfig(r=r, alpha=8, target_modules=list(targets)))
    with torch.no_grad():  # as if trained: B away from zero, the head's trained copy away from the original
        for name, p in peft_model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return peft_model


def test_default_targets_are_every_backbone_linear_and_only_adapters_and_head_train(tokenizer):
    peft_model = lora_model(tokenizer)
    assert backbone_linear_names(tiny_model(tokenizer)) == [
        "down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"
    ]  # fmt: skip
    trained = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n or "score.modules_to_save" in n for n in trained)
    assert any("score.modules_to_save" in n for n in trained)  # the head in full, not adapted
    assert sum("lora_A" in n for n in trained) == 7 * 2  # 7 linear layers in each of 2 blocks


def test_reward_model_over_peft_scores_like_peft_itself(tokenizer):
    """RewardModel's own forward (backbone + head at the last token, both layouts) against peft's
    forward through transformers' sequence-classification head, one unpadded sequence at a time."""
    peft_model = lora_model(tokenizer, targets=["q_proj", "v_proj", "down_proj"]).eval()
    model = RewardModel(peft_model)
    pairs = random_pairs(len(tokenizer), 6, seed=2)
    with torch.no_grad():
        want_c = torch.stack([peft_model(input_ids=torch.tensor([p.prompt_ids + p.chosen_ids])).logits[0, 0]
                              for p in pairs])  # fmt: skip
        want_r = torch.stack([peft_model(input_ids=torch.tensor([p.prompt_ids + p.rejected_ids])).logits[0, 0]
                              for p in pairs])  # fmt: skip
        for collate in (PaddedCollator(tokenizer.pad_token_id), SharedCollator(tokenizer.pad_token_id)):
            chosen, rejected = pair_rewards(model, collate(pairs))
            assert torch.allclose(chosen, want_c, atol=1e-5) and torch.allclose(rejected, want_r, atol=1e-5)


def test_configured_targets_are_checked(tokenizer):
    with pytest.raises(ConfigError, match="'score' is the score head"):
        add_lora(tiny_model(tokenizer), LoraConfig(r=2, target_modules=["q_proj", "score"]))
    with pytest.raises(ConfigError, match=r"model\.lora\.target_modules=\['query_key_value'\]"):
        add_lora(tiny_model(tokenizer), LoraConfig(r=2, target_modules=["query_key_value"]))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_gradients(tokenizer, lora):
    """Recomputing activations must not change a gradient, nor lose the LoRA ones behind frozen embeddings."""
    pairs = random_pairs(len(tokenizer), 5, seed=4)
    batch = SharedCollator(tokenizer.pad_token_id)(pairs)
    grads = []
    for checkpointing in (False, True):
        set_seed(0)
        cfg = ModelConfig(
            random_init=RandomInitConfig(hidden_size=32, num_hidden_layers=2, intermediate_size=64),
            gradient_checkpointing=checkpointing,
        )
        hf = build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
        model = RewardModel(add_lora(hf, LoraConfig(r=4, alpha=8)) if lora else hf).train()
        if lora:
            torch.nn.init.normal_(next(p for n, p in model.named_parameters() if "lora_B" in n))
        assert hf.model.gradient_checkpointing == checkpointing
        bradley_terry_loss(*pair_rewards(model, batch), center_rewards_coef=0.1).backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    plain, recomputed = grads
    assert plain.keys() == recomputed.keys()
    assert all(recomputed[n] is not None and torch.allclose(recomputed[n], plain[n], atol=1e-6) for n in plain)
    assert any(recomputed[n].abs().sum() > 0 for n in plain if "lora_A" in n or not lora)


@pytest.mark.slow
def test_a_lora_run_trains_adapters_and_head_and_exports_them_merged(tmp_path):
    out = tmp_path / "lora"
    overrides = [
        "data.synthetic.n_train=96",
        "data.synthetic.n_eval=30",
        *TINY_MODEL,
        "train.batch_size=8",
        "train.max_steps=6",
        "train.save_steps=6",
        "train.lr=1e-2",
        "train.report_to=[]",
        "model.lora.r=4",
        "model.lora.alpha=8",
        "model.lora.target_modules=[q_proj, v_proj]",
        f"output_dir={out}",
    ]
    cfg = load_config(QUICKSTART, overrides)
    result = main(cfg)

    step = out / "checkpoints" / "step-6"
    adapter = json.loads((step / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert adapter["modules_to_save"] == ["score"]
    saved = load_file(step / "model.safetensors")
    tokenizer = AutoTokenizer.from_pretrained(out / "export")
    set_seed(cfg.train.seed)  # the initial weights, rebuilt as the run built them
    init = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).state_dict()
    prefix = "hf.base_model.model."
    frozen = {k[len(prefix) :].replace(".base_layer", "").replace(".original_module", ""): v
              for k, v in saved.items() if "lora_" not in k and "modules_to_save" not in k}  # fmt: skip
    assert frozen.keys() == init.keys() and all(torch.equal(frozen[k], init[k]) for k in init)
    assert all(saved[k].abs().sum() > 0 for k in saved if "lora_B" in k)  # B starts at zero: it trained
    head = saved[prefix + "score.modules_to_save.default.weight"]
    assert not torch.equal(head, init["score.weight"])

    # The merged export, read by plain transformers, reproduces the rewards behind eval.json.
    merged = load_file(out / "export" / "model.safetensors")
    assert merged.keys() == init.keys() and torch.equal(merged["score.weight"], head)
    pairs = load_pairs(str(out / "data"), "test", [])
    chosen = plain_transformers_rewards(out / "export", [p.prompt + p.chosen for p in pairs]).double()
    assert chosen.mean().item() == pytest.approx(result["overall"]["mean_chosen_reward"], abs=1e-5)
    # `python -m rm export` of the final checkpoint rebuilds the LoRA model from adapter_config.json.
    again = load_file(export_run(step, tmp_path / "from-checkpoint") / "model.safetensors")
    assert again.keys() == merged.keys() and all(torch.equal(again[k], merged[k]) for k in merged)


def test_qlora_needs_a_gpu_and_bitsandbytes_and_says_so(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.lora\.qlora: QLoRA trains LoRA adapters"):
        load_config(QUICKSTART, ["model.lora.qlora=true"])
    cfg = load_config(QUICKSTART, ["model.lora.qlora=true", "model.lora.r=8", f"output_dir={tmp_path}"])
    if not qlora_unavailable():
        with pytest.raises(ConfigError, match="quantizes a pretrained model: set model.name_or_path"):
            require_qlora(cfg.model)
        pytest.skip("CUDA and bitsandbytes are present: QLoRA itself runs in scripts/gpu_check.sh")
    with pytest.raises(ConfigError, match="model.lora.qlora=true needs .*(CUDA GPU|bitsandbytes)"):
        main(cfg)
    assert not (tmp_path / "data").exists()  # refused before any data was loaded


def test_mixed_precision_auto_takes_bf16_only_where_the_gpu_has_it(monkeypatch):
    assert mixed_precision("") is None and mixed_precision("fp16") == "fp16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert mixed_precision("auto") == "no"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert mixed_precision("auto") == "no"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert mixed_precision("auto") == "bf16"
