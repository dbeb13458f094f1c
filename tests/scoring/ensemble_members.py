"""Members for the ensemble tests: tiny exports of different seeds, and LoRA runs of one base, each a run directory
whose one checkpoint holds what training saves for LoRA (the frozen base, the LoRA matrices and the score head's
trained copy under peft's adapter "default", adapter_config.json beside them), made without training: the tests
need members that differ, not members that learned."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from conftest import tiny_model

SHAPE = dict(model_type="llama", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
MAX_LENGTH = 64


def export(tokenizer, folder: Path, seed: int, max_length: int = MAX_LENGTH) -> Path:
    """A tiny random Llama seeded `seed`, exported as rm exports a run (its run config saying `max_length`)."""
    from rm.config import RunConfig
    from rm.export.folder import Weights, export_model

    cfg = RunConfig()
    cfg = replace(cfg, collator=replace(cfg.collator, max_length=max_length))
    return export_model(tiny_model(tokenizer, seed=seed), tokenizer, folder, cfg, Weights(None, None))


def attribute_export(tokenizer, folder: Path, seed: int) -> Path:
    """A tiny random Llama with a reward and two attribute outputs (`model.head.attributes`), seeded `seed`."""
    from rm.config import RandomInitConfig, RunConfig
    from rm.export.folder import Weights, export_model
    from rm.model.build import build_model

    cfg = RunConfig(output_dir=str(folder.parent / "run"))
    cfg.model.head.attributes = ["helpfulness", "verbosity"]
    cfg.model.head.attribute_scales = {"helpfulness": [0.0, 4.0], "verbosity": [0.0, 4.0]}
    cfg.model.random_init = RandomInitConfig(**SHAPE)
    cfg.collator.max_length = MAX_LENGTH
    torch.manual_seed(seed)
    hf = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).eval()
    return export_model(hf, tokenizer, folder, cfg, Weights(None, None))


def lora_run(tokenizer, run: Path, seed: int, base_seed: int = 0, rank: int = 4, finished: bool = True) -> Path:
    """A LoRA run (model.lora.r = `rank`) on the tiny Llama seeded `base_seed`, its adapter and head copy drawn
    from `seed`, kept as one sealed checkpoint (step 2; `finished`: eval.json says the run ended there)."""
    from rm.config import LoraConfig, ModelConfig, RandomInitConfig, RunConfig
    from rm.config.rundir import STATE, write_config
    from rm.model.lora import add_lora, save_adapter_config
    from rm.model.reward import RewardModel
    from rm.training.checkpoint_folder import seal

    peft = add_lora(tiny_model(tokenizer, seed=base_seed), LoraConfig(r=rank))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # LoRA B starts at zero (no change): draw every adapter tensor so the members differ
        for name, p in peft.named_parameters():
            if ".default." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    cfg = RunConfig(model=ModelConfig(random_init=RandomInitConfig(**SHAPE), lora=LoraConfig(r=rank)))
    cfg = replace(cfg, collator=replace(cfg.collator, max_length=MAX_LENGTH), output_dir=str(run))
    step = run / "checkpoints" / "step-2"
    step.mkdir(parents=True)
    write_config(cfg, run / "config.yaml")
    write_config(cfg, step / "config.yaml")
    tokenizer.save_pretrained(run / "tokenizer")
    state = {k: v.contiguous() for k, v in RewardModel(peft).state_dict().items()}
    save_file(state, step / "model.safetensors")
    save_adapter_config(peft, step)
    (step / STATE).write_text(json.dumps({"step": 2, "max_steps": 2}))
    seal(step, 2)
    if finished:
        overall = {"n": 4, "accuracy": 0.5, "mean_chosen_reward": 0.1, "mean_rejected_reward": 0.0}
        (run / "eval.json").write_text(json.dumps({"overall": overall, "subsets": {}, "train": {"steps": 2}}))
    return run


def adapter_numel(run: Path) -> int:
    """Elements of the run's adapter: its LoRA matrices and its score head's trained copy."""
    from safetensors import safe_open

    with safe_open(str(run / "checkpoints" / "step-2" / "model.safetensors"), framework="pt") as f:
        return sum(f.get_tensor(k).numel() for k in f.keys() if ".default." in k)
