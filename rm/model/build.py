"""Building the transformers model behind a reward model: loaded by name or path, or random from a config.

The model is an `AutoModelForSequenceClassification` with one output, so the exported folder is the
trained weights under the architecture's own names (see `rm/model/reward.py` for how it is called).
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, PreTrainedModel

from rm.config import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_model(cfg: ModelConfig, vocab_size: int, pad_token_id: int, eos_token_id: int | None) -> PreTrainedModel:
    """Load `cfg.name_or_path`, or build a random model of `cfg.random_init`'s shape (seed first)."""
    common = {"num_labels": 1, "pad_token_id": pad_token_id}
    if cfg.name_or_path:
        model = AutoModelForSequenceClassification.from_pretrained(
            cfg.name_or_path,
            dtype=DTYPES[cfg.dtype],
            attn_implementation=cfg.attn_implementation,
            trust_remote_code=cfg.trust_remote_code,
            **common,
        )
        if model.get_input_embeddings().num_embeddings < vocab_size:
            model.resize_token_embeddings(vocab_size)
    else:
        r = cfg.random_init
        config = AutoConfig.for_model(
            r.model_type,
            vocab_size=vocab_size,
            hidden_size=r.hidden_size,
            num_hidden_layers=r.num_hidden_layers,
            num_attention_heads=r.num_attention_heads,
            num_key_value_heads=r.num_attention_heads,
            intermediate_size=r.intermediate_size,
            max_position_embeddings=r.max_position_embeddings,
            eos_token_id=eos_token_id,
            bos_token_id=None,
            tie_word_embeddings=False,
            **common,
        )
        model = AutoModelForSequenceClassification.from_config(
            config, dtype=DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation
        )
    if cfg.gradient_checkpointing:
        # Non-reentrant, torch's recommended mode: it needs no input that requires grad (frozen
        # embeddings under LoRA) and composes with DDP.
        model.activation_checkpointing_enable({"use_reentrant": False})
    return model
