"""Pairs to token ids (each prompt tokenized once), and token ids to batches of named tensors.

Encoding happens once before training, so epochs and evals reuse the ids. Keeping the prompt and
the two responses as separate id lists is what lets a layout share the prompt between chosen and
rejected; the padded layout below simply concatenates them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase

from rm.data import Pair
from rm.hh import HUMAN
from rm.tokenizer import special_prefix


@dataclass
class EncodedPair:
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    subset_id: int
    margin: float = 0.0
    index: int = -1
    """Position in the encoded split: lets multi-process eval count each pair exactly once."""


@dataclass
class EncodeReport:
    """What encoding did to the data, so nothing is changed or dropped without a count."""

    kept: int = 0
    prompt_truncated: int = 0
    prompt_cut_inside_turn: int = 0
    """Of those, prompts whose last turn alone was still too long, so its oldest tokens went too."""
    too_long: list[str] = field(default_factory=list)
    """Origins of pairs whose responses alone exceed max_length (dropped, listed here)."""


def _cut_leading_turns(prompt: str, turn_starts: tuple[int, ...] | None = None) -> list[str]:
    """Shorter and shorter prompts, each starting at a later user turn (the last one ends the list).

    Turns start where the pair says (chat-template text), else at each "\\n\\nHuman:" tag (HH text).
    """
    if turn_starts is None:
        turn_starts = tuple(i for i in range(1, len(prompt)) if prompt.startswith(HUMAN, i))
    return [prompt[i:] for i in turn_starts if 0 < i < len(prompt)]


def encode_pairs(
    pairs: list[Pair], tokenizer: PreTrainedTokenizerBase, max_length: int, subset_names: list[str]
) -> tuple[list[EncodedPair], EncodeReport]:
    """Tokenize prompt and responses separately; fit each pair into `max_length`.

    A prompt that is too long loses whole turns from the left (the final question stays); if the
    last turn alone is still too long its oldest tokens go. Pairs whose longer response cannot fit
    even with an empty prompt are dropped and listed in the report.
    """
    prefix = special_prefix(tokenizer)
    index = {name: i for i, name in enumerate(subset_names)}
    report = EncodeReport()
    out = []

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    for pair in pairs:
        chosen, rejected = ids(pair.chosen), ids(pair.rejected)
        room = max_length - len(prefix) - max(len(chosen), len(rejected))
        if room < 0:
            report.too_long.append(pair.origin or pair.prompt[:40])
            continue
        prompt = ids(pair.prompt)
        if len(prompt) > room:
            report.prompt_truncated += 1
            for shorter in _cut_leading_turns(pair.prompt, pair.turn_starts):
                prompt = ids(shorter)
                if len(prompt) <= room:
                    break
            if len(prompt) > room:  # even the last turn alone is too long: keep its newest tokens
                report.prompt_cut_inside_turn += 1
                prompt = prompt[len(prompt) - room :] if room else []
        out.append(EncodedPair(prefix + prompt, chosen, rejected, index[pair.subset], pair.margin or 0.0, len(out)))
    report.kept = len(out)
    return out, report


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
        rows = [p.prompt_ids + p.chosen_ids for p in batch] + [p.prompt_ids + p.rejected_ids for p in batch]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "prompt_lengths": torch.tensor([len(p.prompt_ids) for p in batch]),
            "subset_ids": torch.tensor([p.subset_id for p in batch]),
            "margin": torch.tensor([p.margin for p in batch], dtype=torch.float32),
            "pair_index": torch.tensor([p.index for p in batch]),
        }
