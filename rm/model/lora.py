"""LoRA and QLoRA through `peft`: the backbone frozen (QLoRA: in 4-bit), low-rank updates and the score head trained.

The score head starts random, so it is trained in full rather than adapted: peft's `modules_to_save`
keeps a trainable copy of it, saved with the adapters and put back in place by `merge_and_unload`
at export (rm/export/folder.py). Targets default to every linear layer of the backbone, found by walking
the model, so one default serves Llama, Qwen2, GPT-NeoX… alike. The wrapped model is built without a
`task_type`, as rm/export/restore.py rebuilds it from the `adapter_config.json` that every checkpoint carries.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from rm.config import LoraConfig, ModelConfig
from rm.errors import ConfigError
from rm.model.build import DTYPES
from rm.model.reward import score_head, transformers_model


def backbone_linear_names(hf: PreTrainedModel) -> list[str]:
    """Leaf names of the backbone's linear layers (q_proj, down_proj…), the score head excluded."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in hf.base_model.named_modules() if isinstance(m, nn.Linear)})


def add_lora(hf: PreTrainedModel, cfg: LoraConfig) -> nn.Module:
    """Wrap `hf` in a peft LoRA model: adapters on `cfg.target_modules`, the score head trained in full."""
    from peft import LoraConfig as PeftLoraConfig

    head_name = next(name for name, m in hf.named_children() if m is score_head(hf))
    targets = cfg.target_modules or backbone_linear_names(hf)
    if head_name in targets:
        raise ConfigError(f"model.lora.target_modules: {head_name!r} is the score head, which is trained in full")
    config = PeftLoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=targets,
        modules_to_save=[head_name],
    )
    try:
        return peft_model(hf, config)
    except ValueError as e:  # peft names the target it could not find
        raise ConfigError(f"model.lora.target_modules={targets}: {e}") from None


def peft_model(hf: PreTrainedModel, config) -> nn.Module:
    """peft's `get_peft_model(hf, config)` without the FutureWarning it provokes: peft reads the model's
    `is_gradient_checkpointing`, which transformers 5 deprecates, on every wrap (nothing to act on for a user)."""
    from peft import get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return get_peft_model(hf, config)


def save_adapter_config(model: nn.Module, folder: Path) -> None:
    """peft's `adapter_config.json`, which rm/export/restore.py needs to rebuild a LoRA checkpoint."""
    model.peft_config[model.active_adapter].save_pretrained(str(folder))


def is_lora(model: nn.Module) -> bool:
    return transformers_model(model) is not model


def qlora_unavailable() -> str:
    """Why QLoRA cannot run here ('' when it can): it needs a CUDA GPU and bitsandbytes."""
    missing = []
    if not torch.cuda.is_available():
        missing.append("a CUDA GPU (none is visible to torch)")
    if importlib.util.find_spec("bitsandbytes") is None:
        missing.append("bitsandbytes (pip install bitsandbytes)")
    return " and ".join(missing)


def require_qlora(cfg: ModelConfig) -> None:
    """Fail before any data is loaded when QLoRA cannot run here, saying what is missing."""
    why = qlora_unavailable()
    if why:
        raise ConfigError(f"model.lora.qlora=true needs {why}; set model.lora.qlora=false to train plain LoRA")
    if not cfg.name_or_path:
        raise ConfigError("model.lora.qlora=true quantizes a pretrained model: set model.name_or_path")


def load_4bit(cfg: ModelConfig, vocab_size: int, pad_token_id: int, device_index: int) -> PreTrainedModel:
    """The pretrained backbone in 4-bit NF4 (double quantisation, bf16 compute) on this process's GPU.

    The score head stays in full precision (it is trained), and peft's k-bit preparation casts norms to
    fp32 and sets up gradient checkpointing when asked.
    """
    require_qlora(cfg)
    from peft import prepare_model_for_kbit_training
    from transformers import AutoConfig, AutoModelForSequenceClassification, BitsAndBytesConfig

    from rm.model.architecture import own_class
    from rm.model.pretrained import fresh_head_load

    compute = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    quantization = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute,
        llm_int8_skip_modules=["score", "classifier"],  # the head is trained in full, never quantized
    )
    config = AutoConfig.from_pretrained(cfg.name_or_path, trust_remote_code=cfg.trust_remote_code)
    own = own_class(config, cfg.trust_remote_code)  # rm's reward head, for architectures transformers has none for
    remote = {} if own else {"trust_remote_code": cfg.trust_remote_code}
    with fresh_head_load(cfg.name_or_path):
        model = (own or AutoModelForSequenceClassification).from_pretrained(
            cfg.name_or_path,
            num_labels=1,
            pad_token_id=pad_token_id,
            dtype=DTYPES[cfg.dtype] if cfg.dtype != "float32" else compute,
            attn_implementation=cfg.attn_implementation,
            quantization_config=quantization,
            device_map={"": device_index},
            **remote,
        )
    if model.get_input_embeddings().num_embeddings < vocab_size:
        raise ConfigError(
            f"the tokenizer has {vocab_size} tokens, more than {cfg.name_or_path}'s embeddings; "
            "a 4-bit model cannot be resized: use the model's own tokenizer"
        )
    return prepare_model_for_kbit_training(
        model,
        use_gradient_checkpointing=cfg.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
    )
