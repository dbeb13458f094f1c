"""Building the transformers model behind a reward model: loaded by name or path, or random from a config.

The model is the architecture's `…ForSequenceClassification` with one output where transformers has
one, so the exported folder is the trained weights under the architecture's own names; any other
causal LM gets rm's reward head on its backbone (rm/model/architecture.py). Either way
rm/model/reward.py calls the backbone and the `score` head itself.
"""

from __future__ import annotations

import inspect

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, PretrainedConfig, PreTrainedModel

from rm.config import ModelConfig
from rm.config.head_config import mix_problems, mix_weights
from rm.errors import ConfigError, ModelError
from rm.model.architecture import not_supported, own_class, reward_class

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def random_config(cfg: ModelConfig, vocab_size: int, pad_token_id: int, eos_token_id: int | None):
    """The transformers config of `cfg.random_init`: its shape fields, then its extra `config` keys."""
    r = cfg.random_init
    shape = {
        "vocab_size": vocab_size,
        "hidden_size": r.hidden_size,
        "num_hidden_layers": r.num_hidden_layers,
        "num_attention_heads": r.num_attention_heads,
        "num_key_value_heads": r.num_attention_heads,
        "intermediate_size": r.intermediate_size,
        "max_position_embeddings": r.max_position_embeddings,
        "eos_token_id": eos_token_id,
        "bos_token_id": None,
        "tie_word_embeddings": False,
        "num_labels": 1,
        "pad_token_id": pad_token_id,
    } | output_labels(cfg)
    try:
        config = AutoConfig.for_model(r.model_type, **(shape | dict(r.config)))
    except (ValueError, TypeError, KeyError) as e:  # unknown model type, or a config its validators refuse
        first = " ".join(str(e).split())[:300]
        raise ConfigError(f"model.random_init (model_type {r.model_type!r}): {first}") from None
    why = not_supported(config)
    if why:
        raise ConfigError(f"model.random_init.model_type: {why}")
    return config


def output_labels(cfg: ModelConfig) -> dict:
    """With `model.head.attributes`, the config keys of a 1 + A output head: output 0 the reward (what every client
    of a one-output reward model reads), then one regression output per attribute, named. Without them nothing,
    so a model without attributes is built exactly as before."""
    names = cfg.head.attributes
    if not names:
        return {}
    id2label = {i: name for i, name in enumerate(["reward", *names])}
    label2id = {name: i for i, name in id2label.items()}
    return {"num_labels": 1 + len(names), "id2label": id2label, "label2id": label2id, "problem_type": "regression"}


def attention(cls: type[PreTrainedModel], cfg: ModelConfig) -> str:
    """`cfg.attn_implementation`, except that SDPA, the default, becomes eager for the classes without it
    (Gemma 2, and Mamba's, which have no attention at all)."""
    if cfg.attn_implementation == "sdpa" and not getattr(cls, "_supports_sdpa", False):
        return "eager"
    return cfg.attn_implementation


def position_limit(config: PretrainedConfig) -> tuple[str, int] | None:
    """(key, value) of the longest sequence the model's positions cover, or None where it has no such limit
    (Mamba: a config built with an extra `max_position_embeddings` only carries it, its class declares none)."""
    key = getattr(type(config), "attribute_map", {}).get("max_position_embeddings", "max_position_embeddings")
    value = getattr(config, key, None)
    if key not in inspect.signature(type(config).__init__).parameters or not isinstance(value, int) or value <= 0:
        return None
    return key, value


def check_positions(max_length: int, config: PretrainedConfig, length_key: str, where: str) -> None:
    """A `max_length` past the model's position limit is refused, naming both: positions past it were never
    trained (learned embeddings index out of range; rope extrapolates), so such a run or score is not a reward."""
    limit = position_limit(config)
    if max_length and limit and max_length > limit[1]:
        raise ConfigError(
            f"{length_key}={max_length} is above the model's position limit, {limit[0]}={limit[1]} ({where}): "
            f"use {length_key}<={limit[1]}"
        )


def build_model(
    cfg: ModelConfig, vocab_size: int, pad_token_id: int, eos_token_id: int | None, max_length: int = 0
) -> PreTrainedModel:
    """Load `cfg.name_or_path`, or build a random model of `cfg.random_init`'s shape (seed first); a
    `max_length` (collator.max_length) above its position limit is a ConfigError before any weight is read."""
    common = {"num_labels": 1, "pad_token_id": pad_token_id} | output_labels(cfg)
    if cfg.name_or_path:
        config = AutoConfig.from_pretrained(cfg.name_or_path, trust_remote_code=cfg.trust_remote_code)
        check_positions(max_length, config, "collator.max_length", cfg.name_or_path)
        load = dict(dtype=DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation, **common)
        why = not_supported(config)
        if why and not cfg.trust_remote_code:
            raise ModelError(f"{cfg.name_or_path}: {why}")
        cls = own_class(config, cfg.trust_remote_code)
        if cls is None:  # transformers' own class, or the repository's code (trusted)
            model = AutoModelForSequenceClassification.from_pretrained(
                cfg.name_or_path, trust_remote_code=cfg.trust_remote_code, **load
            )
        else:
            model = cls.from_pretrained(cfg.name_or_path, **(load | {"attn_implementation": attention(cls, cfg)}))
        if model.get_input_embeddings().num_embeddings < vocab_size:
            model.resize_token_embeddings(vocab_size)
    else:
        config = random_config(cfg, vocab_size, pad_token_id, eos_token_id)
        check_positions(max_length, config, "collator.max_length", "model.random_init.max_position_embeddings")
        cls = reward_class(config)
        model = cls._from_config(config, dtype=DTYPES[cfg.dtype], attn_implementation=attention(cls, cfg))
    set_reward_mix(model, cfg)
    if cfg.gradient_checkpointing:
        # Non-reentrant, torch's recommended mode: it needs no input that requires grad (frozen
        # embeddings under LoRA) and composes with DDP.
        model.activation_checkpointing_enable({"use_reentrant": False})
    return model


def set_reward_mix(model: PreTrainedModel, cfg: ModelConfig) -> None:
    """With `model.head.reward_from_attributes`, mark `model` so that `RewardModel` computes output 0 as that mix of
    the attribute outputs (rm/model/reward.py) and record the mix in its config (config.json, the card); the export
    writes the mix into row 0 of the head (rm/export/outputs.py:tie_reward_row). The mark is an attribute of the
    module, not of the config: a model loaded from an export already has the mix in row 0, and reads it as is.
    Without a mix nothing is set, and a mix a loaded checkpoint's config carried is dropped."""
    problems = mix_problems(cfg.head) if cfg.head.attributes else []
    if problems:
        raise ConfigError(problems[0])
    weights = mix_weights(cfg.head)
    if weights is None:
        if hasattr(model.config, "reward_from_attributes"):
            delattr(model.config, "reward_from_attributes")
        return
    model.config.reward_from_attributes = dict(cfg.head.reward_from_attributes)
    model.rm_reward_mix = tuple(weights)


def given_model(
    hf: PreTrainedModel, cfg: ModelConfig, vocab_size: int, pad_token_id: int, max_length: int = 0
) -> PreTrainedModel:
    """A model the caller loaded (`rm.train(model=...)`; a peft model too), used in place of `build_model`'s and
    checked as it checks one: a linear `score` head with 1 + len(model.head.attributes) outputs, positions for
    `max_length`, embeddings for the tokenizer's `vocab_size`, the pad id set, the reward mix marked."""
    base = hf.get_base_model() if hasattr(hf, "get_base_model") else hf  # a PeftModel's transformers model
    head = getattr(base, "score", None) or getattr(base, "classifier", None)
    if not isinstance(getattr(head, "original_module", head), torch.nn.Linear):
        raise ModelError(
            f"model: a {type(base).__name__} has no linear `score` head, where rm reads the reward: load it with "
            "AutoModelForSequenceClassification.from_pretrained(name, num_labels=1)"
        )
    outputs = 1 + len(cfg.head.attributes)
    if base.config.num_labels != outputs:
        raise ModelError(
            f"model: its head has {base.config.num_labels} outputs (config.num_labels), rm trains {outputs} (the "
            f"reward{', then model.head.attributes' if cfg.head.attributes else ''}): load it with num_labels={outputs}"
        )
    check_positions(max_length, base.config, "collator.max_length", "model")
    if base.get_input_embeddings().num_embeddings < vocab_size:
        base.resize_token_embeddings(vocab_size)
    base.config.pad_token_id = pad_token_id
    set_reward_mix(base, cfg)
    if cfg.gradient_checkpointing:
        base.activation_checkpointing_enable({"use_reentrant": False})
    return hf
