"""Batch layouts for scoring single texts: each text a `ScoreSeq`, a `Layout` turns a list of them into a batch.

`PaddedLayout` (each sequence its own right-padded row) works with every model; `PackedScoring` packs
consecutive sequences whose `prompt_ids` are equal into one group, so the prompt is computed once (a
pair's chosen and rejected come out adjacent when `rm.evaluation.score_file.score_seqs` sorts them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from rm.collate.pack import pack
from rm.collate.padded import pad_rows
from rm.tokens.store import TokenIds, join_ids, same_ids


@dataclass
class ScoreSeq:
    """One text to score, tokenized as prompt and response (the reward is read at the response's end)."""

    prompt_ids: TokenIds
    response_ids: TokenIds
    truncated: bool = False
    """True when the text was cut to fit `max_length` (rm/tokens/truncation.py: oldest prompt turns first)."""
    group: bool = False
    """One of a K-response record's responses: a batch is not cut inside its prompt's run of them."""

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def prompt_runs(seqs: list[ScoreSeq]) -> list[list[int]]:
    """Indices of consecutive sequences with the same prompt ids: the runs a layout computes the prompt of once."""
    members: list[list[int]] = []
    for i, s in enumerate(seqs):
        if members and same_ids(seqs[members[-1][0]].prompt_ids, s.prompt_ids):
            members[-1].append(i)
        else:
            members.append([i])
    return members


class Layout(Protocol):
    """How sequences become a batch, and a batch becomes rewards: [len(seqs)] in the order given."""

    def collate(self, seqs: list[ScoreSeq]) -> dict[str, torch.Tensor]: ...

    def rewards(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...


class PaddedLayout:
    """Each sequence its own row, right-padded, as `rm.collate.padded.PaddedCollator` lays out pairs.

    Two sequences, pad id 0, prompts [5, 6] and [7], responses [8] and [9, 10, 11]:
        input_ids      = [[5, 6, 8, 0], [7, 9, 10, 11]]
        attention_mask = [[1, 1, 1, 0], [1, 1, 1, 1]]
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def collate(self, seqs: list[ScoreSeq]) -> dict[str, torch.Tensor]:
        return pad_rows([join_ids(s.prompt_ids, s.response_ids) for s in seqs], self.pad_token_id)

    def rewards(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])


class PackedScoring:
    """The scoring layout (a `Layout`): sequences that share a prompt share one copy of it.

    Consecutive sequences with identical prompt ids form a group `[prompt | response 1 | response 2 …]`
    (the order `rm.evaluation.score_file.score_seqs` sorts them in puts them side by side); groups are packed into
    rows like pairs. Each response sees the prompt and itself, so every reward equals a forward of
    that sequence alone.
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def collate(self, seqs: list[ScoreSeq]) -> dict[str, torch.Tensor]:
        members = prompt_runs(seqs)
        groups = [(seqs[m[0]].prompt_ids, [seqs[i].response_ids for i in m]) for m in members]
        tensors, ends = pack(groups, self.pad_token_id)
        reward_index = torch.empty(len(seqs), dtype=torch.long)
        for m, e in zip(members, ends, strict=True):
            reward_index[m] = torch.tensor(e)
        return {**tensors, "reward_index": reward_index}

    def rewards(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**batch)
