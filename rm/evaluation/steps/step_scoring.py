"""Every step of every solution of a batch of problems scored in one forward: the scoring room's step reader.

A problem's solutions are one group (its prompt once, each solution a response: rm/tokens/steps/step_tokens.py),
laid out as `rm score` lays out a record's responses (`Layout`: padded rows, or the shared layout where each
solution sees its prompt and itself only), and the reward head is read at the last token of every step of every
solution, in that one forward (`Layout.outputs_at`, i.e. `RewardModel.forward` with `reward_index`): no prefix is
encoded twice. A step's score is the probability that it is correct, sigmoid(head output), as the loss trains it
(binary cross-entropy per step) and as the exported token-classification model's softmax gives it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from rm.collate.scoring import Layout, scored, step_index
from rm.errors import ModelError
from rm.model.reward import RewardModel
from rm.tokens.steps.step_tokens import STEP_SEPARATOR, StepIds, encode_steps
from rm.tokens.tokenizer import special_prefix

StepScores = list[list[float | None]]
"""Per solution, per step: P(step is correct), or None for a step that did not fit max_length."""


@dataclass(frozen=True)
class StepProblem:
    """A problem and its solutions, each a list of steps (text)."""

    prompt: str
    solutions: tuple[tuple[str, ...], ...]


def step_outputs(
    model: nn.Module, layout: Layout, device: torch.device, encoded: Sequence[StepIds]
) -> list[list[list[float]]]:
    """The head's output at every kept step of every solution of `encoded` (per problem, per solution), from one
    forward of all of them; a solution with no step kept is not laid out and gets []."""
    if not isinstance(model, RewardModel):
        raise ModelError(
            f"{type(model).__name__}: step scores are read at each step's last token, which needs a decoder reward "
            "model with a linear score head (this one pools the sequence itself)"
        )
    groups, ends = [], []
    for g in (e.group for e in encoded):
        kept = [k for k, offsets in enumerate(g.step_ends) if offsets]
        if kept:
            groups.append(scored(g.prompt_ids, [g.response_ids[k] for k in kept]))
            ends += [g.step_ends[k] for k in kept]
    flat: list[float] = []
    if groups:
        batch = {k: v.to(device) for k, v in layout.collate(groups).items()}
        out = layout.outputs_at(model, batch, step_index(layout, batch, groups, ends))
        flat = (out if out.dim() == 1 else out[:, 0]).float().tolist()
    result, at = [], 0
    for e in encoded:
        per_solution = []
        for offsets in e.group.step_ends:
            per_solution.append(flat[at : at + len(offsets)])
            at += len(offsets)
        result.append(per_solution)
    return result


def probability(output: float) -> float | None:
    """sigmoid of the head's output; None where it is not finite (a model that overflowed)."""
    if not math.isfinite(output):
        return None
    return 1.0 / (1.0 + math.exp(-output)) if output >= 0 else math.exp(output) / (1.0 + math.exp(output))


@torch.inference_mode()
def score_steps(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    layout: Layout,
    problems: Sequence[StepProblem],
    *,
    max_length: int,
    separator: str = STEP_SEPARATOR,
    batch_size: int = 16,
) -> list[StepScores]:
    """Per problem, each solution's step probabilities, problems batched whole (about `batch_size` solutions a
    forward; a problem with more solutions is one forward of its own)."""
    device = next(model.parameters()).device
    prefix = special_prefix(tokenizer)
    encoded = [encode_steps(tokenizer, p.prompt, p.solutions, separator, max_length, prefix) for p in problems]
    results: list[StepScores] = []
    start = 0
    while start < len(encoded):
        end, size = start, 0
        while end < len(encoded) and (end == start or size + len(encoded[end].group.response_ids) <= batch_size):
            size += len(encoded[end].group.response_ids)
            end += 1
        for e, outputs in zip(encoded[start:end], step_outputs(model, layout, device, encoded[start:end]), strict=True):
            results.append(
                [[probability(v) for v in out] + [None] * cut for out, cut in zip(outputs, e.steps_cut, strict=True)]
            )
        start = end
    return results
