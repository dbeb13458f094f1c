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

STEP_SEPARATOR = DataConfig.step_separator
"""The default `data.step_separator`: a blank line after the problem and after every step."""


@dataclass(frozen=True)
class StepIds:
    """One problem's solutions as ids: the prompt once, each solution's ids and the offset (in those ids) of the
    last token of each of its steps that fitted."""

    prompt_ids: list[int]
    response_ids: list[np.ndarray]
    step_ends: list[list[int]]
    """Per solution, one offset per kept step, increasing; the solution's ids end at its last kept step."""
    steps_cut: list[int]
    """Per solution, how many trailing steps did not fit max_length (0: all kept)."""


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
    """`prompt` and its `solutions` (each a list of step texts) by the module's rule; `max_length` 0: no limit.
    `prefix`: the tokenizer's special prefix (rm/tokens/tokenizer.py:special_prefix)."""
    flat = [step + separator for solution in solutions for step in solution]
    pieces = step_pieces(tokenizer, [prompt + separator, *flat])
    prompt_ids = [*prefix, *pieces[0]]
    room = max_length - len(prompt_ids) if max_length else None
    responses, ends, cut, at = [], [], [], 1
    for solution in solutions:
        lengths = [len(p) for p in pieces[at : at + len(solution)]]
        offsets = np.cumsum(lengths) - 1
        kept = len(offsets) if room is None else int(np.searchsorted(offsets, room, side="left"))
        ids = [t for p in pieces[at : at + kept] for t in p]
        responses.append(np.asarray(ids, dtype=np.int64))
        ends.append([int(o) for o in offsets[:kept]])
        cut.append(len(solution) - kept)
        at += len(solution)
    return StepIds(prompt_ids, responses, ends, cut)
