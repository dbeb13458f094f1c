"""The shared-prefix packed layout: each prompt computed once, no slot spent on padding but a row's tail.

A pair becomes one segment `[prompt | chosen | rejected]`. The rejected tokens take the positions
the chosen tokens had (both continue the prompt), and may attend to the prompt but never to the
chosen tokens, so each response sees exactly what it would see in a forward of its own. Several
pairs share a row, with no attention across pairs. On HH-RLHF the prompt is ~70% of a sequence,
so this needs about a quarter of the token slots of two padded rows per pair (see issue 3's
measurements, reproduced by `scripts/bench_train.py`).

The mask is built on the device, in the forward pass, from three small integer tensors, so the
data loader never ships a [rows, T, T] tensor: a dense boolean mask for SDPA or eager attention, or
a FlexAttention `BlockMask`, which skips the blocks that are all masked.
"""

from __future__ import annotations

import torch

from rm.collator import EncodedPair

PROMPT, CHOSEN, REJECTED = 0, 1, 2


def pair_length(p: EncodedPair) -> int:
    return len(p.prompt_ids) + len(p.chosen_ids) + len(p.rejected_ids)


def plan_rows(lengths: list[int], width: int) -> list[list[int]]:
    """First-fit decreasing: indices into `lengths` grouped into rows of at most `width` tokens."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if lengths[i] > width:
            raise ValueError(f"a pair of {lengths[i]} tokens cannot fit a row of {width}")
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(width - lengths[i])
    return rows


def pack(
    groups: list[tuple[list[int], list[list[int]]]], pad_token_id: int, min_width: int = 0
) -> tuple[dict[str, torch.Tensor], list[list[int]]]:
    """Pack (prompt, [response, …]) groups into rows; each group is `[prompt | response 1 | response 2 …]`.

    Every response's positions continue the prompt's, and its segment id (1, 2, …) keeps it from
    seeing the other responses of its group (`dense_mask`). Returns the row tensors and, per group,
    the flat index (row * T + column) of each response's last token, where its reward is read.
    """
    lengths = [len(prompt) + sum(len(r) for r in responses) for prompt, responses in groups]
    rows = plan_rows(lengths, max(max(lengths), min_width))
    width = max(sum(lengths[g] for g in row) for row in rows)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_token_id, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    group_ids = torch.full(shape, -1, dtype=torch.long)
    segment_ids = torch.full(shape, -1, dtype=torch.long)
    ends: list[list[int]] = [[] for _ in groups]
    for r, row in enumerate(rows):
        col = 0
        for g in row:
            prompt, responses = groups[g]
            n_p = len(prompt)
            for segment, ids in enumerate([prompt, *responses]):
                start = 0 if segment == PROMPT else n_p  # every response continues the prompt
                end = col + len(ids)
                input_ids[r, col:end] = torch.tensor(ids, dtype=torch.long)
                position_ids[r, col:end] = torch.arange(start, start + len(ids))
                group_ids[r, col:end] = g
                segment_ids[r, col:end] = segment
                if segment != PROMPT:
                    ends[g].append(r * width + end - 1)
                col = end
    tensors = {"input_ids": input_ids, "position_ids": position_ids, "pair_ids": group_ids, "segment_ids": segment_ids}
    return tensors, ends


class SharedCollator:
    """Packs pairs into rows of `[p0 c0 r0 p1 c1 r1 …]`, as wide as the longest pair (or `pack_length`).

    Worked example, pad id 0, pairs A = (prompt [5, 6], chosen [8], rejected [11, 12]) and
    B = (prompt [7], chosen [9, 10], rejected [13]), pack_length 9: both fit one row.

        input_ids    = [[5, 6, 8, 11, 12, 7, 9, 10, 13]]
        position_ids = [[0, 1, 2, 2,  3,  0, 1, 2,  1]]   # rejected restarts where the prompt ended
        pair_ids     = [[0, 0, 0, 0,  0,  1, 1, 1,  1]]   # -1 on padding; attention never crosses pairs
        segment_ids  = [[0, 0, 1, 2,  2,  0, 1, 1,  2]]   # 0 prompt, 1 chosen, 2 rejected
        chosen_index   = [2, 7]                           # flat index (row * T + column) of each
        rejected_index = [4, 8]                           #   segment's last token: the reward is read there
        subset_ids, margin, pair_index as in the padded layout, in the order of the batch.

    Token q may attend to token k when they are in the same pair, k <= q, and k is in the prompt or
    in q's own segment (so rejected never sees chosen): see `dense_mask`.
    """

    def __init__(self, pad_token_id: int, pack_length: int = 0):
        self.pad_token_id = pad_token_id
        self.pack_length = pack_length

    def __call__(self, batch: list[EncodedPair]) -> dict[str, torch.Tensor]:
        groups = [(p.prompt_ids, [p.chosen_ids, p.rejected_ids]) for p in batch]
        tensors, ends = pack(groups, self.pad_token_id, self.pack_length)
        return {
            **tensors,
            "chosen_index": torch.tensor([e[0] for e in ends]),
            "rejected_index": torch.tensor([e[1] for e in ends]),
            "subset_ids": torch.tensor([p.subset_id for p in batch]),
            "margin": torch.tensor([p.margin for p in batch], dtype=torch.float32),
            "pair_index": torch.tensor([p.index for p in batch]),
        }


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


def choose_layout(model: torch.nn.Module, requested: str, pad_token_id: int) -> tuple[str, str]:
    """(layout, reason). `auto` takes the shared layout when the model reproduces separate forwards
    with it on a probe batch, and otherwise falls back to padded, saying why."""
    if requested == "padded":
        return "padded", "collator.layout is padded"
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    hf = model.hf
    why_not = ""
    # BERT-like encoders also have a causal-LM class (BertLMHeadModel), so ask for the masked-LM one too.
    if type(hf.config) not in MODEL_FOR_CAUSAL_LM_MAPPING or type(hf.config) in MODEL_FOR_MASKED_LM_MAPPING:
        why_not = f"{hf.config.model_type} is not a causal decoder (its tokens see later tokens)"
    else:
        why_not = _probe(model, pad_token_id)
    if not why_not:
        return "shared", "the model reproduces separate forwards in the shared layout"
    if requested == "shared":
        raise ValueError(f"collator.layout=shared is not possible: {why_not}; use collator.layout=padded")
    return "padded", why_not


@torch.no_grad()
def _probe(model: torch.nn.Module, pad_token_id: int) -> str:
    """Compare shared-layout rewards with separate forwards on two small random pairs."""
    from rm.collator import PaddedCollator
    from rm.model import pair_rewards

    device = next(model.parameters()).device
    vocab = model.hf.get_input_embeddings().num_embeddings
    g = torch.Generator().manual_seed(0)

    def ids(n: int) -> list[int]:
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    pairs = [EncodedPair(ids(5), ids(3), ids(4), 0, index=0), EncodedPair(ids(2), ids(4), ids(1), 0, index=1)]
    was_training = model.training
    model.eval()
    try:
        batches = [c(pairs) for c in (SharedCollator(pad_token_id), PaddedCollator(pad_token_id))]
        (sc, sr), (pc, pr) = [
            pair_rewards(model, {k: v.to(device) for k, v in b.items()}) for b in batches
        ]  # fmt: skip
    except Exception as e:  # an architecture that rejects custom masks or position ids
        return f"{type(model.hf).__name__} rejected the shared layout ({type(e).__name__}: {e})"
    finally:
        model.train(was_training)
    got, want = torch.cat([sc, sr]), torch.cat([pc, pr])
    tol = 1e-4 if model.hf.dtype == torch.float32 else 3e-2
    err = (got - want).abs().max().item()
    if not err <= tol * (1 + want.abs().max().item()):
        return f"{type(model.hf).__name__} gives different rewards in the shared layout (max diff {err:.2e})"
    return ""


class PackedScoring:
    """The scoring layout (rm.score's `Layout`): sequences that share a prompt share one copy of it.

    Consecutive sequences with identical prompt ids form a group `[prompt | response 1 | response 2 …]`
    (the order `rm.score.score_seqs` sorts them in puts them side by side); groups are packed into
    rows like pairs. Each response sees the prompt and itself, so every reward equals a forward of
    that sequence alone.
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def collate(self, seqs: list) -> dict[str, torch.Tensor]:
        members: list[list[int]] = []  # runs of consecutive sequences with the same prompt
        for i, s in enumerate(seqs):
            if members and seqs[members[-1][0]].prompt_ids == s.prompt_ids:
                members[-1].append(i)
            else:
                members.append([i])
        groups = [(seqs[m[0]].prompt_ids, [seqs[i].response_ids for i in m]) for m in members]
        tensors, ends = pack(groups, self.pad_token_id)
        reward_index = torch.empty(len(seqs), dtype=torch.long)
        for m, e in zip(members, ends, strict=True):
            reward_index[m] = torch.tensor(e)
        return {**tensors, "reward_index": reward_index}

    def rewards(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**batch)
