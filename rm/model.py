"""The reward model: a `transformers` sequence-classification model used the Bradley-Terry way.

Training holds the same `AutoModelForSequenceClassification` object that is exported, so the
export is the trained weights under the architecture's own names, nothing renamed. The forward
pass, though, is rm's own: it runs the backbone, picks each row's last attended position from the
attention mask (transformers' own head searches for `pad_token_id`, which is wrong when pad == eos),
and applies the score head to those positions only.
"""

from __future__ import annotations

import torch
from torch import nn
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


def transformers_model(model: nn.Module) -> PreTrainedModel:
    """The transformers model inside a peft `PeftModel` (LoRA layers injected in place), or `model` itself."""
    get_base = getattr(model, "get_base_model", None)  # PeftModel's; transformers models have none
    return get_base() if callable(get_base) else model


def score_head(model: nn.Module) -> nn.Module:
    """The architecture's own classifier layer (`score` in Llama, Qwen2, Mistral, GPT-NeoX, GPT-2…).

    Under LoRA it is peft's `modules_to_save` wrapper, whose forward uses the trained copy of the layer.
    """
    model = transformers_model(model)
    for name in ("score", "classifier"):
        head = getattr(model, name, None)
        if isinstance(getattr(head, "original_module", head), nn.Linear):
            return head
    raise TypeError(
        f"{type(model).__name__} has no linear `score` head; rm reads the reward at the last token, "
        "which needs a decoder-style sequence-classification model"
    )


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last attended position of each row: [rows, L] -> [rows]. Works for any padding side."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (attention_mask.bool() * positions).amax(dim=1)


class RewardModel(nn.Module):
    """Wraps the sequence-classification model so accelerate (DDP, FSDP) sees one module whose
    forward returns the rewards; `.hf` is what gets exported.

    Two batch layouts reach `forward` (see rm/collator.py and rm/layout.py):
    - padded: `attention_mask` [rows, T]; one reward per row, at its last attended token;
    - shared: `pair_ids` and `segment_ids` [rows, T] describe the packed pairs, the attention mask
      is built here on the device, and `reward_index` gives the flat positions to read.
    """

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf  # a transformers model, or a peft PeftModel around one (LoRA)
        score_head(hf)  # fail at construction, not at the first batch, for models without one

    @property
    def _no_split_modules(self) -> list[str] | None:
        """FSDP's transformer-based auto-wrap reads this to find the decoder layers to shard."""
        return transformers_model(self.hf)._no_split_modules

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        pair_ids: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
        reward_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Rewards [n] in fp32: one per row (padded) or one per `reward_index` entry (shared)."""
        if pair_ids is not None:
            attention_mask = self._shared_mask(pair_ids, segment_ids)
        backbone = transformers_model(self.hf).base_model  # LlamaModel etc.: hidden states, no head
        out = backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        hidden = out.last_hidden_state  # [rows, T, H]
        if reward_index is None:
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            reward_index = rows * hidden.shape[1] + last_token_index(attention_mask)  # [rows]
        picked = hidden.reshape(-1, hidden.shape[-1])[reward_index]  # [n, H]
        return score_head(self.hf)(picked).squeeze(-1).float()

    def _shared_mask(self, pair_ids: torch.Tensor, segment_ids: torch.Tensor):
        from rm import layout

        hf = transformers_model(self.hf)
        impl = hf.config._attn_implementation
        if impl == "flex_attention":
            return layout.block_mask(pair_ids, segment_ids)
        mask = layout.dense_mask(pair_ids, segment_ids)
        return mask if impl == "sdpa" else layout.additive_mask(mask, hf.dtype)


def pair_rewards(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(r_chosen, r_rejected), each [pairs], from a batch in either layout."""
    n = batch["subset_ids"].shape[0]
    if "pair_ids" in batch:
        r = model(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            pair_ids=batch["pair_ids"],
            segment_ids=batch["segment_ids"],
            reward_index=torch.cat([batch["chosen_index"], batch["rejected_index"]]),
        )  # [2 * pairs]
    else:
        r = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])  # [2 * pairs]
    return r[:n], r[n:]
