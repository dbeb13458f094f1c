"""The padded layout: every sequence its own right-padded row. Simple, and works with any model.

Training and eval put each response of a group in a row of its own, after the prompt (`PaddedCollator`);
scoring puts each text in one row (`rm.collate.scoring.PaddedLayout`). Both fill rows with `pad_rows`.

Every group layout (padded, shared, packed) reads its rewards in one order, response slot by response
slot: the first response of every group, then the second of every group that has one, and so on
(`response_order`). For pairs that is every chosen, then every rejected, so `rewards[:B]` and `rewards[B:]`
line up. `better` and `worse` index those rewards: one entry per strictly ordered pair of a group.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rm.tokens.store import EncodedGroup, TokenIds, join_ids


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


def response_order(batch: list[EncodedGroup]) -> list[tuple[int, int]]:
    """(group, response) in the order rewards are read: slot by slot, then group by group."""
    slots = max(len(g.response_ids) for g in batch)
    return [(i, k) for k in range(slots) for i, g in enumerate(batch) if k < len(g.response_ids)]


def group_fields(batch: list[EncodedGroup], order: list[tuple[int, int]]) -> dict[str, torch.Tensor]:
    """What every group layout carries besides its rows: subset ids, margins, each group's index in its split
    ([groups] each); `better`/`worse` ([ordered pairs] each): positions in the rewards (read in `order`) of the
    better and the worse response of every pair of a group whose ranks differ, group by group, with
    `pair_group`, the group of each; `tie_a`/`tie_b` ([tied pairs]) likewise for equal ranks; and
    `response_group`/`response_rank` ([responses], in reward order) for losses over whole rankings
    (rm/model/group_loss.py)."""
    at = {gk: n for n, gk in enumerate(order)}
    better, worse, pair_group, tie_a, tie_b = [], [], [], [], []
    for i, g in enumerate(batch):
        for a in range(len(g.response_ids)):
            for b in range(len(g.response_ids)):
                if g.rank[a] < g.rank[b]:
                    better.append(at[i, a])
                    worse.append(at[i, b])
                    pair_group.append(i)
                elif a < b and g.rank[a] == g.rank[b]:
                    tie_a.append(at[i, a])
                    tie_b.append(at[i, b])
    return {
        "subset_ids": torch.tensor([g.subset_id for g in batch]),
        "margin": torch.tensor([g.margin for g in batch], dtype=torch.float32),
        "pair_index": torch.tensor([g.index for g in batch]),
        "better": torch.tensor(better, dtype=torch.long),
        "worse": torch.tensor(worse, dtype=torch.long),
        "pair_group": torch.tensor(pair_group, dtype=torch.long),
        "tie_a": torch.tensor(tie_a, dtype=torch.long),
        "tie_b": torch.tensor(tie_b, dtype=torch.long),
        "response_group": torch.tensor([i for i, _ in order], dtype=torch.long),
        "response_rank": torch.tensor([batch[i].rank[a] for i, a in order], dtype=torch.long),
    }


class PaddedCollator:
    """Each response after its prompt in a right-padded row of its own: simple, and works with any model.

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
        pair_index     = [i0, i1]           # position of each group in its split
        better, worse  = [0, 1], [2, 3]     # rows of each pair's chosen and rejected

    A group of three responses ranked 0, 1, 2 adds rows in the same slot order and three pairs. The reward
    is read at each row's last attended position, found from `attention_mask`.
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, batch: list[EncodedGroup]) -> dict[str, torch.Tensor]:
        order = response_order(batch)
        rows = [join_ids(batch[i].prompt_ids, batch[i].response_ids[k]) for i, k in order]
        return {
            **pad_rows(rows, self.pad_token_id),
            "prompt_lengths": torch.tensor([len(g.prompt_ids) for g in batch]),
            **group_fields(batch, order),
        }
