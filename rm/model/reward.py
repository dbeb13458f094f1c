"""The reward model: a `transformers` sequence-classification model used the Bradley-Terry way.

Training holds the same object that is exported (the architecture's own `…ForSequenceClassification`,
or rm's reward head on a causal LM's backbone, rm/model/architecture.py), so the export is the trained
weights under the architecture's own names, nothing renamed. The forward
pass, though, is rm's own: it runs the backbone, picks each row's last attended position from the
attention mask (transformers' own head searches for `pad_token_id`, which is wrong when pad == eos),
and applies the score head to those positions only.

Every reward forward of rm lives in rm/model/, one per batch layout, so that training, `rm eval`, `rm score`,
`rm serve` and `rm.load(...).score` read a reward the same way:
- padded rows (one text a row) and shared rows (a group's prompt once, then its responses, under a packing
  mask): `RewardModel.forward`, the forward training runs;
- cached prompt (runs of responses to one prompt, each response on its prompt's keys and values):
  rm/model/cached_prompt.py:PrefixScoring, exact where attention is plain causal (`prefix_support` checks);
- pooled (a classifier that is not one linear layer, e.g. RoBERTa's dense + out_proj on its first token: the
  model pools the sequence itself): `PooledLogits`.
`reward_module` picks between `RewardModel` and `PooledLogits` for a loaded model; tests/meta/
test_reward_forwards.py fails if a module outside rm/model/ runs a backbone or the score head itself.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import nn
from transformers import PreTrainedModel

from rm.errors import TrainingError
from rm.model import masks
from rm.model.length.length_head import LengthHead, with_length


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

    Two batch layouts reach `forward` (see rm/collate/padded.py and rm/collate/pack.py):
    - padded: `attention_mask` [rows, T]; one reward per row, at its last attended token;
    - shared: `pair_ids` and `segment_ids` [rows, T] describe the packed groups, the attention mask
      is built here on the device, and `reward_index` gives the flat positions to read.
    """

    def __init__(
        self,
        hf: nn.Module,
        tie_nu: nn.Parameter | None = None,
        attribute_log_scale: nn.Parameter | None = None,
        length_momentum: float | None = None,
    ):
        super().__init__()
        self.hf = hf  # a transformers model, or a peft PeftModel around one (LoRA)
        self.tie_nu = tie_nu
        """Davidson's learned tie weight before its softplus (rm/model/objective.py); None unless the loss learns it."""
        self.attribute_log_scale = attribute_log_scale
        """[A] log sigma per attribute of `loss.attribute_loss=gaussian` (rm/model/objective.py); None otherwise."""
        weight = score_head(hf).weight  # fail at construction, not at the first batch, for models without one
        std = getattr(transformers_model(hf).config, "initializer_range", 0.02)
        self.length_head = None if length_momentum is None else LengthHead(weight.detach(), length_momentum, std)
        """`model.head.length`'s output (rm/model/length/); None without one. Training reads it, nothing else."""

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
        length: bool = False,
    ) -> torch.Tensor:
        """Rewards [n] in fp32: one per row (padded) or one per `reward_index` entry (shared); with attribute
        outputs (`model.head.attributes`), the head's [n, 1 + A], column 0 the reward (`mixed_reward`). With
        `length` (training a length head), the length output after them as a last column (`with_length`)."""
        if pair_ids is not None:
            limit = masks.column_limit(transformers_model(self.hf).config)
            if limit is not None and pair_ids.shape[1] > limit:
                raise TrainingError(
                    f"packed rows of {pair_ids.shape[1]} tokens: this model is exact in the shared layout for rows of "
                    f"at most {limit} (attention temperature tuning reads the column, not the position); "
                    "lower collator.pack_length or use collator.layout=padded"
                )
            attention_mask = self._shared_mask(pair_ids, segment_ids, position_ids)
        backbone = transformers_model(self.hf).base_model  # LlamaModel etc.: hidden states, no head
        extra = {} if position_ids is None else {"position_ids": position_ids}  # Mamba takes none
        if takes_use_cache(type(backbone)):  # a reward is one forward: no key/value cache of every layer at once
            extra["use_cache"] = False
        out = backbone(input_ids=input_ids, attention_mask=attention_mask, **extra)
        hidden = out.last_hidden_state  # [rows, T, H]
        if reward_index is None:
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            reward_index = rows * hidden.shape[1] + last_token_index(attention_mask)  # [rows]
        picked = hidden.reshape(-1, hidden.shape[-1])[reward_index]  # [n, H]
        head, mix = score_head(self.hf), getattr(transformers_model(self.hf), "rm_reward_mix", None)
        out = mixed_reward(head(picked).float(), mix)  # from [n, 1] or [n, 1 + A]
        if not length or self.length_head is None:
            return out
        return with_length(out, self.length_head(picked, head.weight, mix))

    def update_length_stats(self, reduce) -> None:
        """At each optimizer step: the length head's running statistics from the step's, summed by `reduce` over
        processes (rm/model/length/length_head.py); nothing without a length head."""
        if self.length_head is not None:
            self.length_head.update(reduce)

    def _shared_mask(self, pair_ids: torch.Tensor, segment_ids: torch.Tensor, position_ids: torch.Tensor):
        """The packing rule and each layer type's own window or chunk: one mask, or a dict by layer type."""
        hf = transformers_model(self.hf)
        impl = hf.config._attn_implementation
        built = {}
        for kind, rule in masks.attention_rules(hf.config).items():
            if impl == "flex_attention":
                built[kind] = masks.block_mask(pair_ids, segment_ids, position_ids, rule)
                continue
            mask = masks.dense_mask(pair_ids, segment_ids)
            if rule.span:
                mask = mask & masks.position_mask(position_ids, rule)
            built[kind] = mask if impl == "sdpa" else masks.additive_mask(mask, hf.dtype)
        return built[None] if None in built else built


class PooledLogits(nn.Module):
    """Models whose classifier is not one linear layer (RoBERTa's dense + out_proj…) pool the sequence themselves;
    their logits are the reward. Same call as `RewardModel`: (input_ids, attention_mask) -> [rows] fp32, or with
    several outputs [rows, 1 + A] (column 0 the reward), as `RewardModel` returns them."""

    def __init__(self, hf: PreTrainedModel):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        logits = self.hf(input_ids=input_ids, attention_mask=attention_mask).logits
        return (logits[:, 0] if logits.shape[-1] == 1 else logits).float()


def reward_module(hf: nn.Module) -> RewardModel | PooledLogits:
    """The forward that reads a loaded model's rewards: `RewardModel` (the reward at the last attended token, as
    training reads it) where its `score` or `classifier` is one linear layer, else `PooledLogits` (the model's own
    pooling)."""
    try:
        return RewardModel(hf)
    except TypeError:  # no linear score head (`score_head`): RoBERTa's classification head…
        return PooledLogits(hf)


def mixed_reward(out: torch.Tensor, mix: tuple[float, ...] | None) -> torch.Tensor:
    """The head's fp32 outputs as the forward returns them: [n] for one output; [n, 1 + A] otherwise, with column 0
    replaced by sum_a mix[a] * column 1 + a where the reward is a mix of the attributes (model.head.
    reward_from_attributes: rm/model/build.py:set_reward_mix). The preference loss then trains the attribute
    outputs through the mix, and head row 0 is unused until the export writes the mix into it."""
    if out.shape[-1] == 1:
        return out.squeeze(-1)
    if mix is None or out.shape[-1] != 1 + len(mix):  # a reward-only cut of the head: row 0 already is the mix
        return out
    reward = out[:, 1:] @ torch.tensor(mix, dtype=out.dtype, device=out.device)  # [n, A] @ [A] -> [n]
    return torch.cat([reward[:, None], out[:, 1:]], dim=1)


@functools.cache
def takes_use_cache(cls: type) -> bool:
    """Whether the backbone's forward has a `use_cache` argument (decoders do; a few architectures do not)."""
    return "use_cache" in inspect.signature(cls.forward).parameters


def group_rewards(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The reward of every response of the batch's groups, [responses], in the layouts' order
    (rm/collate/padded.py: response slot by slot; for pairs every chosen, then every rejected)."""
    out = step_split(group_outputs(model, batch), batch)[0]
    return out if out.dim() == 1 else out[:, 0]


def group_outputs(model: nn.Module, batch: dict[str, torch.Tensor], length: bool = False) -> torch.Tensor:
    """`group_rewards`, or with attribute outputs the head's [responses, 1 + A] (column 0 the reward); with
    `length`, the length head's output as a last column (training only). A batch of stepwise groups
    (rm/collate/step_fields.py) also reads the head at every step's last token, in the same forward: its outputs
    follow the responses' ([responses + steps]; `step_split` parts them)."""
    extra = {"length": True} if length else {}
    steps = batch.get("step_index")
    if "pair_ids" in batch:
        index = batch["reward_index"] if steps is None else torch.cat([batch["reward_index"], steps])
        return model(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            pair_ids=batch["pair_ids"],
            segment_ids=batch["segment_ids"],
            reward_index=index,
            **extra,
        )
    if steps is not None:  # a row a response, each read at its last attended token and at its steps' ends
        mask = batch["attention_mask"]
        ends = torch.arange(len(mask), device=mask.device) * mask.shape[1] + last_token_index(mask)
        extra["reward_index"] = torch.cat([ends, steps])
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **extra)  # a row a response


def step_split(out: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the responses' outputs, the steps' or None) of `group_outputs`' result for `batch`."""
    if "step_index" not in batch:
        return out, None
    responses = len(batch["response_group"])
    return out[:responses], out[responses:]


def pair_rewards(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(r_better, r_worse), each [ordered pairs], from a batch in any layout: for pairs (r_chosen, r_rejected)."""
    r = group_rewards(model, batch)
    return r[batch["better"]], r[batch["worse"]]
