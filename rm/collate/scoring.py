"""Batches for scoring: training's unit, `EncodedGroup` (one prompt and its responses), with a text a group of one.

`batches` plans them: groups whose prompt ids are equal are scored as one (`by_prompt`: four rows of one HelpSteer2
prompt, a pair's chosen and rejected, G completions sent flat compute that prompt once), sorted and cut by
rm/collate/token_budget.py's `count_batches`. A `Layout` turns a batch's groups into tensors and the tensors into one
output row per response: `PaddedLayout` (each response its own right-padded row, as `PaddedCollator` lays out
pairs) works with every model; `PackedScoring` packs each group `[prompt | response 1 | …]` into rows, as training's
packed layout does (`rm.collate.pack.pack`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from rm.collate.pack import pack
from rm.collate.padded import pad_rows
from rm.collate.step_fields import step_positions
from rm.collate.token_budget import count_batches, scoring_order
from rm.tokens.store import EncodedGroup, TokenIds, join_ids


def scored(prompt_ids: TokenIds, response_ids: Sequence[TokenIds], truncated: bool = False) -> EncodedGroup:
    """A group to score, not to train on: no order among its responses (every rank 0), no subset."""
    return EncodedGroup(prompt_ids, list(response_ids), [0] * len(response_ids), 0, truncated=truncated)


def part(group: EncodedGroup, start: int, end: int) -> EncodedGroup:
    """Responses [start, end) of `group` on its prompt: what a batch holds of a group larger than the batch."""
    return scored(group.prompt_ids, group.response_ids[start:end], group.truncated)


def tokens(group: EncodedGroup) -> int:
    """Its prompt once and every response: the tokens of its segment in a packed row."""
    return len(group.prompt_ids) + sum(len(r) for r in group.response_ids)


def responses(groups: Sequence[EncodedGroup]) -> int:
    return sum(len(g.response_ids) for g in groups)


def by_prompt(groups: Sequence[EncodedGroup]) -> list[tuple[EncodedGroup, list[int]]]:
    """Groups with equal prompt ids merged into one (first appearance first, responses in order), each with the
    flat index of its responses among all of `groups`' responses. Each response still attends to its prompt and
    itself only, so its reward is the one it gets alone."""
    runs: dict[tuple[int, ...], tuple[TokenIds, list[TokenIds], list[int]]] = {}
    flat = 0
    for g in groups:
        _, ids, rows = runs.setdefault(tuple(int(t) for t in g.prompt_ids), (g.prompt_ids, [], []))
        ids += g.response_ids
        rows += range(flat, flat + len(g.response_ids))
        flat += len(g.response_ids)
    return [(scored(prompt, ids), rows) for prompt, ids, rows in runs.values()]


@dataclass
class Batch:
    """One forward's groups (whole, or the part of one that a batch could hold) and where their rewards go."""

    groups: list[EncodedGroup]
    rows: list[int]
    """Per response of `groups`, in order: its flat index among the planned groups' responses."""


def batches(groups: Sequence[EncodedGroup], batch_size: int) -> list[Batch]:
    """`groups` in batches of at most `batch_size` responses: equal prompts merged (`by_prompt`), sorted by prompt
    and length so that each batch pads little, a merged group's responses shortest first, never cut where it fits
    a batch (a cut computes its prompt twice)."""
    runs = []
    for group, rows in by_prompt(groups):
        order = sorted(range(len(rows)), key=lambda k: len(group.response_ids[k]))
        runs.append((scored(group.prompt_ids, [group.response_ids[k] for k in order]), [rows[k] for k in order]))
    plan = count_batches([len(rows) for _, rows in runs], scoring_order([g for g, _ in runs]), batch_size)
    return [
        Batch([part(runs[g][0], s, e) for g, s, e in b], [i for g, s, e in b for i in runs[g][1][s:e]]) for b in plan
    ]


class Layout(Protocol):
    """How groups become a batch, and a batch becomes outputs: one row per response, group after group; or the
    outputs at any positions of the batch (`outputs_at`: every step's last token, rm/tokens/steps/), in the same
    forward."""

    def collate(self, groups: list[EncodedGroup]) -> dict[str, torch.Tensor]: ...

    def rewards(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def response_ends(self, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def outputs_at(self, model: nn.Module, batch: dict[str, torch.Tensor], index: torch.Tensor) -> torch.Tensor: ...


def step_index(layout: Layout, batch: dict[str, torch.Tensor], groups: list[EncodedGroup],
               step_ends: Sequence[Sequence[int]]) -> torch.Tensor:  # fmt: skip
    """Flat positions of every step's last token in `batch`, the collated `groups`, response after response
    (group after group) with `step_ends[n]` (offsets in response n's ids): rm/collate/step_fields.py's rule."""
    lengths = [len(r) for g in groups for r in g.response_ids]
    return step_positions(layout.response_ends(batch).tolist(), lengths, step_ends)


class PaddedLayout:
    """Each response its own row after its prompt, right-padded, as `rm.collate.padded.PaddedCollator` lays out pairs.

    Two groups, pad id 0, prompts [5, 6] and [7], responses [8] and [9, 10, 11]:
        input_ids      = [[5, 6, 8, 0], [7, 9, 10, 11]]
        attention_mask = [[1, 1, 1, 0], [1, 1, 1, 1]]
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def collate(self, groups: list[EncodedGroup]) -> dict[str, torch.Tensor]:
        return pad_rows([join_ids(g.prompt_ids, r) for g in groups for r in g.response_ids], self.pad_token_id)

    def rewards(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])

    def response_ends(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch["attention_mask"].cpu()
        return torch.arange(len(mask)) * mask.shape[1] + mask.sum(1) - 1

    def outputs_at(self, model: nn.Module, batch: dict[str, torch.Tensor], index: torch.Tensor) -> torch.Tensor:
        index = index.to(batch["input_ids"].device)
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], reward_index=index)


class PackedScoring:
    """The shared-prompt layout (a `Layout`): each group one segment `[prompt | response 1 | response 2 …]`, groups
    packed into rows first-fit like training's. Each response sees its prompt and itself, so every reward equals a
    forward of that text alone."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def collate(self, groups: list[EncodedGroup]) -> dict[str, torch.Tensor]:
        tensors, ends = pack([(g.prompt_ids, g.response_ids) for g in groups], self.pad_token_id)
        return {**tensors, "reward_index": torch.tensor([e for group in ends for e in group], dtype=torch.long)}

    def rewards(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**batch)

    def response_ends(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["reward_index"].cpu()

    def outputs_at(self, model: nn.Module, batch: dict[str, torch.Tensor], index: torch.Tensor) -> torch.Tensor:
        return model(**{**batch, "reward_index": index.to(batch["input_ids"].device)})
