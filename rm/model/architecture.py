"""Which transformers class holds a reward model: the architecture's own, or a reward head on its causal LM's backbone.

Where transformers has a `…ForSequenceClassification` for the model type (llama, qwen3, mistral,
gpt_neox…), rm uses it, so the export is a standard folder. Of the 196 model types of
transformers 5.24's causal-LM mapping, 110 have none (granite, cohere2, olmoe, gemma4_text,
llama4_text, mamba, falcon_h1…); for those rm builds `<Arch>ForSequenceClassification` from
`rm.model.head.RewardHead` and the architecture's own `PreTrainedModel` subclass, with the causal
LM's backbone under the causal LM's own attribute name (`model`, `backbone`…), so a causal-LM
checkpoint loads into it as it would into a native class.
"""

from __future__ import annotations

import sys

import torch
import transformers
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING,
    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
)

from rm.model.head import RewardHead

SUPPORTED = (
    "rm trains decoder-only causal LMs (any model type of AutoModelForCausalLM: llama, qwen3, mistral, gemma, "
    "granite, mamba…) and models with a sequence-classification class"
)
_WRAPPED: dict[tuple[type, type], type] = {}


def not_supported(config: PretrainedConfig) -> str:
    """Why `config` cannot be a reward model in rm ('' when it can)."""
    kind = type(config)
    if getattr(config, "is_encoder_decoder", False):
        return f"model_type {config.model_type!r} is an encoder-decoder; {SUPPORTED}"
    if kind not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING and kind not in MODEL_FOR_CAUSAL_LM_MAPPING:
        return f"model_type {config.model_type!r} is neither a causal LM nor a sequence classifier; {SUPPORTED}"
    return ""


def is_native(config: PretrainedConfig) -> bool:
    """Whether transformers has a sequence-classification class for this config (no wrapping needed)."""
    # By model type in transformers' own table: loading an rm export with remote code registers its class
    # in the Auto mapping for the rest of the process, and that must not make the architecture "native".
    return getattr(config, "model_type", None) in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES


def reward_class(config: PretrainedConfig) -> type[PreTrainedModel]:
    """The class rm builds for `config`: native sequence classification, else the wrapped causal LM.

    Raises ValueError (with `not_supported`'s reason) for models that cannot be either.
    """
    why = not_supported(config)
    if why:
        raise ValueError(why)
    if is_native(config):
        return getattr(transformers, MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES[config.model_type])
    return wrapped_class(config)


def own_class(config: PretrainedConfig, trust_remote_code: bool = False) -> type[PreTrainedModel] | None:
    """rm's wrapped class for a folder's config, or None where `AutoModelForSequenceClassification` loads
    it: transformers' own classes, and a repository's own code when trusted. rm's own exports name
    `modeling_rm_reward` in `auto_map`; rm loads those with its own class, never the file's code.
    """
    auto = (getattr(config, "auto_map", None) or {}).get("AutoModelForSequenceClassification", "")
    if is_native(config) or (auto and not auto.startswith("modeling_rm_reward.") and trust_remote_code):
        return None
    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING and not not_supported(config):
        return wrapped_class(config)
    return None


def backbone_of(config: PretrainedConfig) -> tuple[str, type[PreTrainedModel]]:
    """(attribute name, class) of the causal LM's backbone, found on a weightless (meta) causal LM."""
    causal_lm = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    with torch.device("meta"):
        lm = causal_lm(config)
    for name, child in lm.named_children():
        if isinstance(child, PreTrainedModel):
            return name, type(child)
    raise ValueError(f"{causal_lm.__name__} has no backbone model to put a reward head on")


def wrapped_class(config: PretrainedConfig) -> type[PreTrainedModel]:
    """`<Arch>ForSequenceClassification`: RewardHead + the architecture's PreTrainedModel subclass.

    Built once per (config class, backbone class) and registered in this module under its name, so it
    pickles like a class defined here.
    """
    prefix, backbone = backbone_of(config)
    key = (type(config), backbone)
    if key not in _WRAPPED:
        base = next(c for c in backbone.__mro__[1:] if issubclass(c, PreTrainedModel))
        arch = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].__name__.replace("ForCausalLM", "")
        name = f"{arch}ForSequenceClassification"
        attrs = {
            "backbone_class": backbone,
            "base_model_prefix": prefix,
            "config_class": type(config),
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"A reward head on {backbone.__name__}, built by rm (transformers has no {name}).",
        }
        cls = type(name, (RewardHead, base), attrs)
        setattr(sys.modules[__name__], name, cls)
        _WRAPPED[key] = cls
    return _WRAPPED[key]


def is_wrapped(hf: nn.Module) -> bool:
    """Whether `hf` is one of rm's wrapped classes (its export needs rm's modeling file)."""
    return isinstance(hf, RewardHead)


def recurrent_reason(hf: PreTrainedModel) -> str:
    """Why packed sequences would leak into each other through recurrent state ('' when they cannot).

    State space and convolution layers (Mamba, Falcon-H1, Bamba, Nemotron-H, Jamba, Zamba, LFM2…)
    carry a state along the row, which no attention mask can cut, so these models take the padded layout.
    """
    config = hf.config.get_text_config()
    kinds = sorted(set(getattr(config, "layer_types", None) or []) - {"full_attention", "sliding_attention"})
    kinds = [k for k in kinds if k != "chunked_attention"]
    convs = sorted({type(m).__name__ for m in hf.modules() if isinstance(m, nn.Conv1d)})
    if not (getattr(hf, "_is_stateful", False) or kinds or convs):
        return ""
    parts = [f"layer types {', '.join(kinds)}" if kinds else "", f"{', '.join(convs)} layers" if convs else ""]
    what = "; ".join(p for p in parts if p) or "a recurrent state"
    return (
        f"{config.model_type} is recurrent or hybrid ({what}): packing several sequences in a row would carry "
        "state from one sequence into the next"
    )
