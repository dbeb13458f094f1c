"""The shared-prefix packed layout: each prompt computed once, no slot spent on padding but a row's tail.

A group becomes one segment `[prompt | response 1 | response 2 …]` (a pair: `[prompt | chosen | rejected]`).
Every response takes the positions right after the prompt (each continues it), and may attend to the prompt
and itself but never to another response, so each response sees exactly what it would see in a forward of its
own. Several groups share a row, with no attention across groups. On HH-RLHF the prompt is ~70% of a sequence,
so this needs about a quarter of the token slots of two padded rows per pair
(measured by `scripts/bench_train.py`).

The mask is built on the device, in the forward pass, from the small integer tensors made here
(`rm/model/masks.py`), so the data loader never ships a [rows, T, T] tensor.
"""

from __future__ import annotations

import torch

from rm.collate.padded import group_fields, response_order
from rm.collate.step_fields import step_fields
from rm.collate.token_budget import plan_rows
from rm.tokens.store import EncodedGroup

PROMPT, CHOSEN, REJECTED = 0, 1, 2


def group_length(g: EncodedGroup) -> int:
    """Tokens of the group's segment: the prompt once, every response."""
    return len(g.prompt_ids) + sum(len(r) for r in g.response_ids)


def pack(
    groups: list[tuple[list[int], list[list[int]]]], pad_token_id: int, min_width: int = 0
) -> tuple[dict[str, torch.Tensor], list[list[int]]]:
    """Pack (prompt, [response, …]) groups into rows; each group is `[prompt | response 1 | response 2 …]`.

    Every response's positions continue the prompt's, and its segment id (1, 2, …) keeps it from
    seeing the other responses of its group (`rm.model.masks.dense_mask`). Returns the row tensors and, per group,
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
    """Packs groups into rows of `[p0 c0 r0 p1 c1 r1 …]`, as wide as the longest group (or `pack_length`).

    Worked example, pad id 0, pairs A = (prompt [5, 6], chosen [8], rejected [11, 12]) and
    B = (prompt [7], chosen [9, 10], rejected [13]), pack_length 9: both fit one row.

        input_ids    = [[5, 6, 8, 11, 12, 7, 9, 10, 13]]
        position_ids = [[0, 1, 2, 2,  3,  0, 1, 2,  1]]   # rejected restarts where the prompt ended
        pair_ids     = [[0, 0, 0, 0,  0,  1, 1, 1,  1]]   # -1 on padding; attention never crosses pairs
        segment_ids  = [[0, 0, 1, 2,  2,  0, 1, 1,  2]]   # 0 prompt, 1 chosen, 2 rejected
        reward_index   = [2, 7, 4, 8]                     # flat index (row * T + column) of each response's
                                                          #   last token, chosen of A, B, then rejected of A, B
        better, worse  = [0, 1], [2, 3]                   # positions in reward_index of each pair's two
        subset_ids, margin, pair_index as in the padded layout, in the order of the batch.

    Token q may attend to token k when they are in the same pair, k <= q, and k is in the prompt or
    in q's own segment (so rejected never sees chosen): see `rm.model.masks.dense_mask`. A group of K
    responses is one segment with segment ids 1..K.
    """

    def __init__(self, pad_token_id: int, pack_length: int = 0):
        self.pad_token_id = pad_token_id
        self.pack_length = pack_length

    def __call__(self, batch: list[EncodedGroup]) -> dict[str, torch.Tensor]:
        tensors, ends = pack([(g.prompt_ids, g.response_ids) for g in batch], self.pad_token_id, self.pack_length)
        order = response_order(batch)
        at = [ends[i][k] for i, k in order]
        fields = {**group_fields(batch, order), **step_fields(batch, order, at)}
        return {**tensors, "reward_index": torch.tensor(at), **fields}


class PackedCollator:
    """Padding-free packing with the prompt duplicated: `[p0 c0] [p0 r0] [p1 c1] …`, each sequence its own
    segment, several per row (the baseline prefix sharing is measured against; Wang & Hegde 2024).

    Same tensors as `SharedCollator`, so the model and the masks are the same: each sequence is a
    group of its own (`pair_ids` counts sequences, two per pair), so it attends only to itself,
    causally, as in a forward of its own. Worked example, pad id 0, pairs A = (prompt [5, 6], chosen
    [8], rejected [11, 12]) and B = (prompt [7], chosen [9, 10], rejected [13]), pack_length 7
    (sequences first-fit into rows, longest first):

        input_ids    = [[5, 6, 11, 12, 5, 6, 8], [7, 9, 10, 7, 13, 0, 0]]
        position_ids = [[0, 1, 2,  3,  0, 1, 2], [0, 1, 2,  0, 1,  0, 0]]
        pair_ids     = [[1, 1, 1,  1,  0, 0, 0], [2, 2, 2,  3, 3, -1, -1]]   # one group per sequence
        segment_ids  = [[0, 0, 1,  1,  0, 0, 1], [0, 1, 1,  0, 1, -1, -1]]   # 0 prompt, 1 its response
        reward_index   = [6, 9, 3, 11]           # flat index of each sequence's last token: chosen of A, B,
                                                 #   then rejected of A, B (as every layout reads rewards)
    """

    def __init__(self, pad_token_id: int, pack_length: int = 0):
        self.pad_token_id = pad_token_id
        self.pack_length = pack_length

    def __call__(self, batch: list[EncodedGroup]) -> dict[str, torch.Tensor]:
        sequences = [(i, k) for i, g in enumerate(batch) for k in range(len(g.response_ids))]
        groups = [(batch[i].prompt_ids, [batch[i].response_ids[k]]) for i, k in sequences]
        tensors, ends = pack(groups, self.pad_token_id, self.pack_length)
        end = {ik: e[0] for ik, e in zip(sequences, ends, strict=True)}
        order = response_order(batch)
        at = [end[ik] for ik in order]
        fields = {**group_fields(batch, order), **step_fields(batch, order, at)}
        return {**tensors, "reward_index": torch.tensor(at), **fields}
