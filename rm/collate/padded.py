"""The padded layout: every sequence its own right-padded row. Simple, and works with any model.

Training and eval put a pair's chosen and rejected sequences in two rows (`PaddedCollator`); scoring
puts each text in one row (`rm.collate.scoring.PaddedLayout`). Both fill rows with `pad_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rm.tokens.store import EncodedPair, TokenIds, join_ids


def pad_rows(rows: Sequence[TokenIds], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad id sequences (lists or arrays) to the longest: {"input_ids", "attention_mask"}, each [rows, longest].

    rows [[5, 6, 8], [7, 9, 10, 11]], pad id 0:
        input_ids      = [[5, 6, 8, 0], [7, 9, 10, 11]]
        attention_mask = [[1, 1, 1, 0], [1, 1, 1, 1]]
    """
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, : len(row)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def pair_fields(batch: list[EncodedPair]) -> dict[str, torch.Tensor]:
    """What every pair layout carries besides its rows: subset ids, margins, each pair's index in its split."""
    return {
        "subset_ids": torch.tensor([p.subset_id for p in batch]),
        "margin": torch.tensor([p.margin for p in batch], dtype=torch.float32),
        "pair_index": torch.tensor([p.index for p in batch]),
    }


class PaddedCollator:
    """Chosen and rejected as separate right-padded rows: simple, and works with any model.

    Worked example, two pairs with pad id 0, prompts [5, 6] and [7], chosen [8] and [9, 10],
    rejected [11, 12] and [13]:

        input_ids      = [[5, 6, 8, 0],     # pair 0, prompt + chosen
                          [7, 9, 10, 0],    # pair 1, prompt + chosen
                          [5, 6, 11, 12],   # pair 0, prompt + rejected
                          [7, 13, 0, 0]]    # pair 1, prompt + rejected
        attention_mask = [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]
        prompt_lengths = [2, 1]
        subset_ids     = [s0, s1]
        margin         = [m0, m1]           # 0.0 where the data has no margin
        pair_index     = [i0, i1]           # position of each pair in its split

    Rows 0..B-1 are chosen and B..2B-1 rejected, so `rewards[:B]` and `rewards[B:]` line up.
    The reward is read at each row's last attended position, found from `attention_mask`.
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, batch: list[EncodedPair]) -> dict[str, torch.Tensor]:
        rows = [join_ids(p.prompt_ids, p.chosen_ids) for p in batch] + [
            join_ids(p.prompt_ids, p.rejected_ids) for p in batch
        ]
        return {
            **pad_rows(rows, self.pad_token_id),
            "prompt_lengths": torch.tensor([len(p.prompt_ids) for p in batch]),
            **pair_fields(batch),
        }
