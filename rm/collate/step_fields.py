"""Where a batch's steps are read, and what they are trained towards: the step tensors every layout carries.

A stepwise group's responses are solutions whose `step_ends` give, per solution, the offset of each step's last
token in its ids (rm/tokens/steps/). Every layout knows where each response ends in its flat batch (row * T +
column: the padded layout's row ends, the packed layouts' `reward_index`), and a step at offset e of a response of
n tokens sits n - 1 - e tokens before that end, whatever the layout. So each collator calls `step_fields` with its
response ends, and the model reads the head at `step_index` in the same forward as the responses' rewards
(rm/model/reward.py:group_outputs).

Steps are listed response by response in reward order (rm/collate/padded.py:response_order), each response's steps
in order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rm.tokens.store import EncodedGroup


def step_positions(ends: Sequence[int], lengths: Sequence[int], step_ends: Sequence[Sequence[int]]) -> torch.Tensor:
    """Flat positions of every step's last token: response n ends at `ends[n]`, has `lengths[n]` tokens and its
    steps end at offsets `step_ends[n]`."""
    at = [end - (n - 1 - e) for end, n, offsets in zip(ends, lengths, step_ends, strict=True) for e in offsets]
    return torch.tensor(at, dtype=torch.long)


def step_fields(
    batch: list[EncodedGroup], order: list[tuple[int, int]], ends: Sequence[int]
) -> dict[str, torch.Tensor]:
    """{} when no group of the batch has steps, else [steps] each: `step_index` (flat position of the step's last
    token), `step_response` (its response's place in reward order), `step_group`, `step_position` (0 for a
    solution's first step), `step_last` (its solution's last step) and `step_target` (its label, NaN where the
    group has none: scoring)."""
    if not any(len(g.step_ends) for g in batch):
        return {}
    response, group, position, last, target = [], [], [], [], []
    for n, (i, k) in enumerate(order):
        offsets = batch[i].step_ends[k] if len(batch[i].step_ends) else []
        labels = batch[i].step_labels[k] if len(batch[i].step_labels) else [math.nan] * len(offsets)
        for j in range(len(offsets)):
            response.append(n)
            group.append(i)
            position.append(j)
            last.append(j == len(offsets) - 1)
            target.append(labels[j])
    lengths = [len(batch[i].response_ids[k]) for i, k in order]
    steps = [batch[i].step_ends[k] if len(batch[i].step_ends) else [] for i, k in order]
    return {
        "step_index": step_positions(ends, lengths, steps),
        "step_response": torch.tensor(response, dtype=torch.long),
        "step_group": torch.tensor(group, dtype=torch.long),
        "step_position": torch.tensor(position, dtype=torch.long),
        "step_last": torch.tensor(last, dtype=torch.bool),
        "step_target": torch.tensor(target, dtype=torch.float32),
    }
