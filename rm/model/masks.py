"""The attention masks of the shared layout, built on the device from the packed rows' pair and segment ids.

Token q may attend to token k when they are in the same group (pair), k <= q, and k is in the prompt
or in q's own segment (so rejected never sees chosen). The rule ships as a [rows, T, T] tensor: a
dense boolean mask for SDPA or eager attention, or a FlexAttention `BlockMask`, which skips the blocks
that are all masked.
"""

from __future__ import annotations

import torch

from rm.collate.pack import PROMPT


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


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Eager attention adds the mask to the scores: 0 where allowed, the dtype's minimum elsewhere."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def block_mask(pair_ids: torch.Tensor, segment_ids: torch.Tensor):
    """The same rule as `dense_mask`, as a FlexAttention BlockMask (fully masked blocks are skipped)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def allowed(b, h, q, k):
        same = pair_ids[b, q] == pair_ids[b, k]
        visible = (segment_ids[b, k] == PROMPT) | (segment_ids[b, q] == segment_ids[b, k])
        return same & (k <= q) & visible

    rows, t = pair_ids.shape
    return create_block_mask(allowed, B=rows, H=None, Q_LEN=t, KV_LEN=t, device=pair_ids.device)
