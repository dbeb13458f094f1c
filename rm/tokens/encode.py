"""Pairs to token ids, each prompt tokenized once, fitted into `collator.max_length`.

Encoding happens once before training, so epochs and evals reuse the ids. Keeping the prompt and
the two responses as separate id sequences is what lets a layout share the prompt between chosen and
rejected (`rm/collate/`); the padded layout simply concatenates them. A split is an `EncodedSplit`:
Arrow columns of int32 ids, not Python lists (rm/tokens/store.py).
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase, TokenizersBackend

from rm.data.formats.hh import HUMAN
from rm.data.formats.pair import Pair
from rm.data.heap import trim_heap
from rm.data.load import LoadedData
from rm.tokens.store import EncodedPair, EncodedSplit, record_batch
from rm.tokens.tokenizer import special_prefix

__all__ = [
    "EncodeReport",
    "EncodedPair",
    "EncodedSplit",
    "encode_kept",
    "encode_pairs",
    "encode_splits",
    "release_texts",
]

log = logging.getLogger("rm")


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


def batch_ids(tokenizer: PreTrainedTokenizerBase, direct: bool = True) -> tuple[Callable[[list[str]], list], bool]:
    """texts -> their ids without special tokens, as `tokenizer(texts, add_special_tokens=False)["input_ids"]`
    gives them; and whether that is the direct call below.

    For a plain fast tokenizer this calls the Rust tokenizer's `encode_batch_fast` directly: the same ids,
    without transformers turning every encoding into a dict of lists (15% of the tokenizing time on
    160,000 HH pairs, issue 12) or computing offsets. Tokenizers whose class changes how text is encoded,
    or whose backend would truncate or pad, go through transformers' call, and `encode_kept` checks the
    two agree on its first chunk before trusting the direct one.
    """

    def through_transformers(texts: list[str]) -> list[list[int]]:
        return tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []

    backend = getattr(tokenizer, "_tokenizer", None)
    cls = type(tokenizer)
    plain = cls._encode_plus is TokenizersBackend._encode_plus and cls.__call__ is PreTrainedTokenizerBase.__call__
    if not (direct and plain and hasattr(backend, "encode_batch_fast")):
        return through_transformers, False

    def rust(texts: list[str]) -> list[list[int]]:
        settled = backend.truncation is None and backend.padding is None
        if not settled or backend.encode_special_tokens != bool(tokenizer.split_special_tokens):
            return through_transformers(texts)
        return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)] if texts else []

    return rust, True


CHUNK = 1024
"""Pairs per batched tokenizer call: a fast tokenizer's batch call costs a fraction of one call per text
(20,000 HH pairs took 61,229 single-text calls at about 250 us each, issue 12)."""


def encode_kept(
    pairs: list[Pair],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    subset_names: list[str],
    progress: str = "",
) -> tuple[EncodedSplit, EncodeReport, np.ndarray]:
    """`encode_pairs`, and the position in `pairs` of each pair kept (eval lists the dropped ones by pair)."""
    prefix = special_prefix(tokenizer)
    index = {name: i for i, name in enumerate(subset_names)}
    report = EncodeReport()
    batches, positions = [], []

    many, direct = batch_ids(tokenizer)

    def fit(pair: Pair, prompt: list[int], chosen: list[int], rejected: list[int]) -> list[int] | None:
        """The prompt ids that fit beside the responses, or None when the responses alone do not fit."""
        room = max_length - len(prefix) - max(len(chosen), len(rejected))
        if room < 0:
            report.too_long.append(pair.origin or pair.prompt[:40])
            return None
        if len(prompt) > room:
            report.prompt_truncated += 1
            # The shorter prompts in one batched call; the longest one that fits is kept, as before.
            for prompt in many(_cut_leading_turns(pair.prompt, pair.turn_starts)):
                if len(prompt) <= room:
                    break
            if len(prompt) > room:  # even the last turn alone is too long: keep its newest tokens
                report.prompt_cut_inside_turn += 1
                prompt = prompt[len(prompt) - room :] if room else []
        return prefix + prompt

    # Redrawn at most every 10 s when stderr is a log file rather than a terminal.
    interval = 0.1 if sys.stderr.isatty() else 10.0
    bar = tqdm(total=len(pairs), desc=progress, unit="pairs", disable=not progress, mininterval=interval)
    for start in range(0, len(pairs), CHUNK):
        chunk = pairs[start : start + CHUNK]
        texts = [t for p in chunk for t in (p.prompt, p.chosen, p.rejected)]
        encoded = many(texts)
        if start == 0 and direct:
            many_checked, _ = batch_ids(tokenizer, direct=False)
            checked = many_checked(texts)
            if checked != encoded:  # the direct call disagrees for this tokenizer: transformers' call from here on
                many, encoded = many_checked, checked
        fitted = []  # this chunk's pairs as lists, gone once they are an Arrow record batch
        for k, pair in enumerate(chunk):
            prompt, chosen, rejected = encoded[3 * k : 3 * k + 3]
            prompt = fit(pair, prompt, chosen, rejected)
            if prompt is not None:
                kept = report.kept + len(fitted)
                fitted.append(EncodedPair(prompt, chosen, rejected, index[pair.subset], pair.margin or 0.0, kept))
                positions.append(start + k)
        report.kept += len(fitted)
        batches.append(record_batch(fitted))
        del encoded, fitted  # before the next chunk's lists exist: one chunk of Python ints alive at a time
        bar.update(len(chunk))
    bar.close()
    return EncodedSplit.from_batches(batches), report, np.asarray(positions, dtype=np.int64)


def encode_pairs(
    pairs: list[Pair],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    subset_names: list[str],
    progress: str = "",
) -> tuple[EncodedSplit, EncodeReport]:
    """Tokenize prompt and responses separately; fit each pair into `max_length`.

    A prompt that is too long loses whole turns from the left (the final question stays); if the
    last turn alone is still too long its oldest tokens go. Pairs whose longer response cannot fit
    even with an empty prompt are dropped and listed in the report. Texts are tokenized CHUNK pairs
    at a time (the same ids as one call per text), and each chunk becomes an Arrow record batch
    straight away, so no list of Python ints outlives its chunk (rm/tokens/store.py); `progress` names a
    progress bar (pairs/s), none if empty.
    """
    split, report, _ = encode_kept(pairs, tokenizer, max_length, subset_names, progress)
    return split, report


def encode_splits(
    data: LoadedData, tokenizer: PreTrainedTokenizerBase, max_length: int, subsets: list[str], progress: bool = False
) -> tuple[EncodedSplit, EncodedSplit]:
    """Both splits tokenized (progress bars if asked); what truncation cost is logged and noted in the data report."""
    train_set, train_report = encode_pairs(data.train, tokenizer, max_length, subsets, "tokenizing train" * progress)
    eval_set, eval_report = encode_pairs(data.eval, tokenizer, max_length, subsets, "tokenizing eval" * progress)
    for split, rep in (("train", train_report), ("eval", eval_report)):
        data.report.notes.setdefault("encoding", {"max_length": max_length})[split] = {
            "kept": rep.kept,
            "prompt_truncated": rep.prompt_truncated,
            "prompt_cut_inside_turn": rep.prompt_cut_inside_turn,
            "dropped_too_long": len(rep.too_long),
            "dropped_too_long_origins": rep.too_long,
        }
        if rep.prompt_truncated or rep.too_long:
            log.warning(
                "%s: %d prompts lost leading turns to fit max_length=%d (%d cut inside their last turn); "
                "%d pairs dropped (responses alone too long), first: %s",
                split,
                rep.prompt_truncated,
                max_length,
                rep.prompt_cut_inside_turn,
                len(rep.too_long),
                rep.too_long[:3],
            )
    return train_set, eval_set


def release_texts(data: LoadedData) -> None:
    """Drop the text pairs once both splits are encoded, and hand the freed heap back to the OS.

    On 160,000 + 8,000 HH pairs the texts hold about 330 MiB that training never reads again. Most of
    it is in strings too large for Python's small-object allocator, which glibc keeps after they are
    freed: RSS fell by 40 MiB without `malloc_trim`, by 190 MiB with it (issue 12). The report stays.
    """
    data.train, data.eval = [], []
    gc.collect()
    pa.default_memory_pool().release_unused()  # Arrow's own allocator keeps freed tables' pages otherwise
    trim_heap()
