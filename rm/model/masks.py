"""The attention masks of the shared layout, built on the device from the packed rows' pair and segment ids.

Token q may attend to token k when they are in the same group (pair), k <= q, and k is in the prompt
or in q's own segment (so rejected never sees chosen). The rule ships as a [rows, T, T] tensor: a
dense boolean mask for SDPA or eager attention, or a FlexAttention `BlockMask`, which skips the blocks
that are all masked.

A custom 4D mask replaces the model's own, so the architecture's own limits on attention are
applied here too, on the tokens' positions in their own sequence (not their columns in the packed
row): a sliding window (Mistral, Gemma 2/3/4, Cohere 2…: key within `sliding_window` positions of the
query) and chunked attention (Llama 4: query and key in the same `attention_chunk_size` chunk). Models
whose layers differ (`config.layer_types`) get one mask per layer type, which transformers 5 models
take as a dict keyed by layer type. Without that, a Mistral with `sliding_window=16` on 9-45-token pairs was
7.6e-2 off in the shared layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rm.collate.pack import PROMPT

ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


@dataclass(frozen=True)
class AttentionRule:
    """What a layer's own mask adds to causality, in positions: a window, a chunk, or neither."""

    window: int | None = None
    chunk: int | None = None

    @property
    def span(self) -> int | None:
        """How far back a query may see at most (None: no limit beyond causality)."""
        return self.window or self.chunk


def attention_rules(config) -> dict[str | None, AttentionRule]:
    """The rule of each layer type ({None: rule} when all layers share one), from the model's config.

    Raises ValueError for a layer type that is not attention (mamba, conv, linear_attention…): no
    mask describes it, and rm/model/probe.py gives such models the padded layout before asking.
    """
    config = config.get_text_config()
    window = getattr(config, "sliding_window", None)
    chunk = getattr(config, "attention_chunk_size", None)
    kinds = sorted(set(getattr(config, "layer_types", None) or []))
    if not kinds:  # one kind of layer: Mistral and Phi-3 apply their window to every layer
        return {None: AttentionRule(window=window, chunk=chunk)}
    unknown = [k for k in kinds if k not in ATTENTION_LAYER_TYPES]
    if unknown:
        raise ValueError(f"layers of type {', '.join(unknown)} are not attention layers")
    rules = {
        "full_attention": AttentionRule(),
        "sliding_attention": AttentionRule(window=window),
        "chunked_attention": AttentionRule(chunk=chunk),
    }
    if len(kinds) == 1:
        return {None: rules[kinds[0]]}
    return {k: rules[k] for k in kinds}


def column_limit(config) -> int | None:
    """The widest packed row that stays exact for a model that reads a token's column in the row where it
    should read its position (None: no such limit). Llama 4 scales the queries of its NoPE layers by
    log1p(floor((column + 1) / floor_scale)) (attention temperature tuning), which is 0 for every
    column below floor_scale - 1, whatever the token's position."""
    config = config.get_text_config()
    rope = getattr(config, "no_rope_layers", None) or []
    if getattr(config, "attn_temperature_tuning", False) and not all(rope):
        return int(config.floor_scale) - 1
    return None


def dense_mask(pair_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """Boolean [rows, 1, T, T], True where query q may attend to key k (SDPA's convention).

    The rule: same group (pair), k <= q, and k is in the prompt or in q's own segment. For a pair
    that is "rejected never sees chosen"; for scoring, any number of responses can share a prompt.
    Padding (group -1) attends causally to padding only, so no query row is empty (an empty row
    would make softmax produce NaN) and no real token ever sees padding.
    """
    t = pair_ids.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=pair_ids.device).tril()  # [T, T]
    same_pair = pair_ids[:, :, None] == pair_ids[:, None, :]  # [rows, T, T]
    visible = (segment_ids[:, None, :] == PROMPT) | (segment_ids[:, :, None] == segment_ids[:, None, :])
    return (same_pair & causal & visible)[:, None]  # [rows, 1, T, T]


def position_mask(position_ids: torch.Tensor, rule: AttentionRule) -> torch.Tensor:
    """Boolean [rows, 1, T, T]: the layer's window or chunk, on positions (transformers' own convention:
    key k is in the window of query q when q - k < window; in q's chunk when both floor-divide alike)."""
    q, k = position_ids[:, :, None], position_ids[:, None, :]  # [rows, T, 1], [rows, 1, T]
    allowed = torch.ones(q.shape[0], q.shape[1], k.shape[2], dtype=torch.bool, device=position_ids.device)
    if rule.window:
        allowed &= q - k < rule.window
    if rule.chunk:
        allowed &= q // rule.chunk == k // rule.chunk
    return allowed[:, None]


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Eager attention adds the mask to the scores: 0 where allowed, the dtype's minimum elsewhere."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def block_mask(
    pair_ids: torch.Tensor,
    segment_ids: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    rule: AttentionRule | None = None,
):
    """`dense_mask` (and `position_mask`) as a FlexAttention BlockMask, which skips fully masked blocks."""
    from torch.nn.attention.flex_attention import create_block_mask

    window, chunk = (rule.window, rule.chunk) if rule is not None else (None, None)

    def allowed(b, h, q, k):
        same = pair_ids[b, q] == pair_ids[b, k]
        visible = (segment_ids[b, k] == PROMPT) | (segment_ids[b, q] == segment_ids[b, k])
        ok = same & (k <= q) & visible
        if window:
            ok = ok & (position_ids[b, q] - position_ids[b, k] < window)
        if chunk:
            ok = ok & (position_ids[b, q] // chunk == position_ids[b, k] // chunk)
        return ok

    rows, t = pair_ids.shape
    return create_block_mask(allowed, B=rows, H=None, Q_LEN=t, KV_LEN=t, device=pair_ids.device)
