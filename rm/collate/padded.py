"""The padded layout: every sequence its own right-padded row. Simple, and works with any model.

Training and eval put each response of a group in a row of its own, after the prompt (`PaddedCollator`);
scoring puts each text in one row (`rm.collate.scoring.PaddedLayout`). Both fill rows with `pad_rows`.

Every group layout (padded, shared, packed) reads its rewards in one order, response slot by response
slot: the first response of every group, then the second of every group that has one, and so on
(`response_order`). For pairs that is every chosen, then every rejected, so `rewards[:B]` and `rewards[B:]`
line up. `better` and `worse` index those rewards: one entry per strictly ordered pair of a group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from rm.collate.comparisons import comparisons
from rm.collate.step_fields import step_fields
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


def pair_margin(g: EncodedGroup, a: int, b: int) -> float:
    """How much better a is than b: the score difference where the data has scores, else the group's margin
    (a pair's `margin` field; 0.0 where there is none)."""
    return float(g.scores[a] - g.scores[b]) if len(g.scores) else float(g.margin)


def group_fields(batch: list[EncodedGroup], order: list[tuple[int, int]]) -> dict[str, torch.Tensor]:
    """What every group layout carries besides its rows: subset ids, margins, each group's index in its split and
    prompt id ([groups] each); `better`/`worse` ([strict pairs] each): positions in the rewards (read in `order`)
    of the better and the worse response of every strictly ordered pair of a group, group by group, with
    `pair_group`, the group of each, and `pair_margin`, its margin; `tie_a`/`tie_b`/`tie_group` ([tied pairs])
    likewise for ties; and `response_group`/`response_rank`/`response_slot` ([responses], in reward order) for
    losses over whole rankings (rm/model/group_loss.py) and for eval. With `model.head.attributes`, also
    `attributes` ([responses, A] float32 in reward order, NaN where a score is missing; `response_attributes`); with
    `loss.strength=soft`, `pair_target` ([strict pairs] float32: a pair's soft label p, NaN where hard), present
    only when a group of the batch has one; and each registered label under its name (`label_tensors`)."""
    at = {gk: n for n, gk in enumerate(order)}
    strict: dict[str, list] = {"better": [], "worse": [], "pair_group": [], "pair_margin": []}
    ties: dict[str, list] = {"tie_a": [], "tie_b": [], "tie_group": []}
    for i, g in enumerate(batch):
        for a, b, tie in comparisons(g):
            if tie:
                ties["tie_a"].append(at[i, a])
                ties["tie_b"].append(at[i, b])
                ties["tie_group"].append(i)
            else:
                strict["better"].append(at[i, a])
                strict["worse"].append(at[i, b])
                strict["pair_group"].append(i)
                strict["pair_margin"].append(pair_margin(g, a, b))
    long = {k: torch.tensor(v, dtype=torch.long) for k, v in (strict | ties).items() if k != "pair_margin"}
    return {
        "subset_ids": torch.tensor([g.subset_id for g in batch]),
        "margin": torch.tensor([g.margin for g in batch], dtype=torch.float32),
        "pair_index": torch.tensor([g.index for g in batch]),
        "prompt_id": torch.tensor([g.prompt_id for g in batch]),
        **long,
        "pair_margin": torch.tensor(strict["pair_margin"], dtype=torch.float32),
        "response_group": torch.tensor([i for i, _ in order], dtype=torch.long),
        "response_rank": torch.tensor([batch[i].rank[a] for i, a in order], dtype=torch.long),
        "response_slot": torch.tensor([a for _, a in order], dtype=torch.long),
        **response_attributes(batch, order),
        **pair_targets(batch, strict["pair_group"]),
        **label_tensors(batch, order),
    }


def label_tensors(batch: list[EncodedGroup], order: list[tuple[int, int]]) -> dict[str, torch.Tensor]:
    """Each registered label of the batch's groups under its name (rm/data/labels.py), float32: [groups] for a
    group's value, [responses] in reward order for one per response; NaN where a group has none."""
    out = {}
    for name in dict.fromkeys(n for g in batch for n in g.labels):
        values = [g.labels.get(name, math.nan) for g in batch]
        if any(isinstance(v, Sequence) for v in values):  # per response
            values = [batch[i].labels[name][k] if name in batch[i].labels else math.nan for i, k in order]
        out[name] = torch.tensor(values, dtype=torch.float32)
    return out


def pair_targets(batch: list[EncodedGroup], pair_group: list[int]) -> dict[str, torch.Tensor]:
    """{"pair_target": [strict pairs]}, each its group's soft label (soft labels are a pair's: a group of two has
    one strict pair); {} when no group has one, so a run without soft labels collates the batches it always did."""
    if all(math.isnan(g.target) for g in batch):
        return {}
    return {"pair_target": torch.tensor([batch[i].target for i in pair_group], dtype=torch.float32)}


def response_attributes(batch: list[EncodedGroup], order: list[tuple[int, int]]) -> dict[str, torch.Tensor]:
    """{"attributes": [responses, A]}, row n the scores of response `order[n]`; {} when no group has scores, so a
    run without attributes collates exactly the batches it always did."""
    if not any(len(g.attributes) for g in batch):
        return {}
    width = {len(g.attributes) // len(g.response_ids) for g in batch}
    if len(width) != 1 or any(len(g.attributes) != next(iter(width)) * len(g.response_ids) for g in batch):
        raise ValueError(f"groups of one batch carry different numbers of attribute scores: {sorted(width)}")
    a = width.pop()
    rows = [batch[i].attributes[k * a : (k + 1) * a] for i, k in order]
    return {"attributes": torch.from_numpy(np.asarray(rows, dtype=np.float32).reshape(len(order), a))}


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
        padded = pad_rows(rows, self.pad_token_id)
        ends = [n * padded["input_ids"].shape[1] + len(row) - 1 for n, row in enumerate(rows)]
        return {
            **padded,
            "prompt_lengths": torch.tensor([len(g.prompt_ids) for g in batch]),
            **group_fields(batch, order),
            **step_fields(batch, order, ends),
        }
