"""A problem and its stepwise solutions as token ids, with the position of every step's last token.

The rule, the same for training, `rm score`, `rm serve`, `rm.load(...).score_steps` and the exported model's card:

    prompt ids  = the tokenizer's special prefix (e.g. BOS) + ids of (problem + separator)
    solution    = ids of (step 1 + separator) + ids of (step 2 + separator) + ...   (each piece tokenized alone,
                  no special tokens)
    step j      is scored at the last token of its piece, so the separator is what the score is read on

Tokenizing each piece alone makes the step boundaries exact whatever the tokenizer merges (a whole-text
tokenization can merge a step's last characters with the next one's first); it is the rule TRL's stepwise trainer
used, and the one a client reproduces with nothing but the tokenizer. The separator is a setting
(`data.step_separator`); its default, a blank line, is how the stepwise datasets print steps. A model trained with
one separator should be read with the same one: exports record it (`rm_step_separator`).

A solution longer than `max_length` beside its prompt keeps its leading steps that fit whole; the steps after
them are not scored (training counts them, scoring returns no score for them). A prompt that leaves no room for
a first step keeps none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedTokenizerBase

from rm.config.schema import DataConfig
from rm.tokens.store import EncodedGroup

STEP_SEPARATOR = DataConfig.step_separator
"""The default `data.step_separator`: a blank line after the problem and after every step."""


@dataclass(frozen=True)
class StepIds:
    """One problem's solutions as ids: a group (its prompt once, each solution a response, `step_ends` the offset
    of each kept step's last token in its ids) and how many trailing steps of each solution did not fit."""

    group: EncodedGroup
    steps_cut: list[int]


def step_pieces(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    """Each text's ids alone, no special tokens, in one tokenizer call."""
    if not texts:
        return []
    return tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]


def encode_steps(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    solutions: Sequence[Sequence[str]],
    separator: str = STEP_SEPARATOR,
    max_length: int = 0,
    prefix: Sequence[int] = (),
) -> StepIds:
    """`prompt` and its `solutions` (each a list of step texts) by the module's rule, in one tokenizer call;
    `max_length` 0: no limit. `prefix`: the tokenizer's special prefix (rm/tokens/tokenizer.py:special_prefix)."""
    pieces = step_pieces(tokenizer, [prompt + separator, *(step + separator for s in solutions for step in s)])
    per_solution, at = [], 1
    for solution in solutions:
        per_solution.append(pieces[at : at + len(solution)])
        at += len(solution)
    return fit_steps([*prefix, *pieces[0]], per_solution, max_length)


def fit_steps(prompt_ids: list[int], solutions: Sequence[Sequence[Sequence[int]]], max_length: int = 0) -> StepIds:
    """The group of `prompt_ids` (special prefix included) and each solution's step pieces' ids, each solution
    keeping its leading steps that fit `max_length` beside the prompt (0: no limit)."""
    room = max_length - len(prompt_ids) if max_length else None
    responses, ends, cut = [], [], []
    for pieces in solutions:
        offsets = np.cumsum([len(p) for p in pieces], dtype=np.int64) - 1
        kept = len(offsets) if room is None else int(np.searchsorted(offsets, room, side="left"))
        responses.append(np.asarray([t for p in pieces[:kept] for t in p], dtype=np.int64))
        ends.append([int(o) for o in offsets[:kept]])
        cut.append(len(pieces) - kept)
    group = EncodedGroup(prompt_ids, responses, [0] * len(responses), 0, step_ends=ends)
    return StepIds(group, cut)


def model_separator(config: object, default: str = STEP_SEPARATOR) -> str:
    """The step separator a model was trained with: its config's `rm_step_separator` (rm's process-reward exports
    record it), else `default`."""
    recorded = getattr(config, "rm_step_separator", None)
    return recorded if isinstance(recorded, str) and recorded else default
