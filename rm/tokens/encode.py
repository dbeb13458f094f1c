"""Pairs to encoded groups: each prompt tokenized once, each group fitted into `collator.max_length`.

Encoding happens once before training, so epochs and evals reuse the ids. Keeping the prompt and the
responses as separate id sequences is what lets a layout share the prompt between them (`rm/collate/`);
the padded layout simply concatenates them. A split is an `EncodedSplit`: Arrow columns of int32 ids, not
Python lists (rm/tokens/store.py). The fitting rule is `rm/tokens/truncation.py`'s, the one `rm score` uses too.
"""

from __future__ import annotations

import gc
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from rm.data.formats.pair import Pair
from rm.data.heap import trim_heap
from rm.data.load import LoadedData
from rm.tokens.ids import CheckedIds, ids_ahead
from rm.tokens.store import EncodedGroup, EncodedSplit, record_batch
from rm.tokens.tokenizer import special_prefix
from rm.tokens.truncation import later_turns, needs_later_turns, truncate_group

log = logging.getLogger("rm")

QUANTILES = (50, 90, 95, 99, 100)


def percentiles(values: list[int]) -> dict[str, int]:
    """Nearest-rank percentiles: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    if not ordered:
        return {}
    out = {f"p{q}": ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] for q in QUANTILES[:-1]}
    return out | {"max": ordered[-1]}


@dataclass
class EncodeReport:
    """What encoding did to one split, so nothing is changed or dropped without a count."""

    kept: int = 0
    prompt_truncated: int = 0
    prompt_cut_inside_turn: int = 0
    """Of those, prompts whose last turn alone was still too long, so its oldest tokens went too."""
    too_long: list[str] = field(default_factory=list)
    """Origins of pairs dropped because they cannot fit (a response alone too long, or no room for the prompt)."""
    keeps_99: int = 0
    """The smallest max_length at which 99% of the pairs fit whole (prefix + prompt + longer response), as
    `rm data inspect` computes its percentiles: what the warning advises."""
    pair_tokens: list[int] = field(default_factory=list, repr=False)
    """Each pair's whole length before fitting (not stored: `keeps_99` is), so shares encoded apart merge."""

    @property
    def loaded(self) -> int:
        return self.kept + len(self.too_long)

    def note(self) -> dict:
        """As the data report holds it (data_report.json's "encoding" entry, per split)."""
        return {
            "kept": self.kept,
            "prompt_truncated": self.prompt_truncated,
            "prompt_cut_inside_turn": self.prompt_cut_inside_turn,
            "dropped_too_long": len(self.too_long),
            "dropped_too_long_origins": self.too_long,
            "keeps_99_max_length": self.keeps_99,
        }

    @classmethod
    def from_note(cls, note: dict) -> EncodeReport:
        return cls(note["kept"], note["prompt_truncated"], note["prompt_cut_inside_turn"],
                   list(note["dropped_too_long_origins"]), note.get("keeps_99_max_length", 0))  # fmt: skip

    @classmethod
    def merged(cls, parts: list[EncodeReport]) -> EncodeReport:
        """Shares of one split encoded apart (data.num_proc), as one: counts added, origins in order."""
        lengths = [n for p in parts for n in p.pair_tokens]
        return cls(
            sum(p.kept for p in parts),
            sum(p.prompt_truncated for p in parts),
            sum(p.prompt_cut_inside_turn for p in parts),
            [o for p in parts for o in p.too_long],
            percentiles(lengths).get("p99", 0),
            lengths,
        )

    def too_costly(self) -> bool:
        """More than 5% of the pairs dropped or with a prompt cut inside its last turn: max_length is too small
        for this data (`collator.max_length=8` on the quickstart dropped 2,452 of 9,000 pairs and cut every other
        prompt inside its last turn, and the run still exited 0)."""
        return len(self.too_long) + self.prompt_cut_inside_turn > 0.05 * max(1, self.loaded)

    def warn(self, split: str, max_length: int) -> None:
        """The one warning about what fitting cost (said again by a run that reads the split from the cache)."""
        if self.prompt_truncated or self.too_long:
            advice = ""
            if self.too_costly() and self.keeps_99 > max_length:
                advice = f"; collator.max_length={self.keeps_99} keeps 99% of the pairs whole"
            log.warning(
                "%s: %d of %d pairs kept at max_length=%d; %d prompts lost leading turns (%d cut inside their last "
                "turn); %d pairs dropped (a response alone too long, or no token left for the prompt), first: %s%s",
                split, self.kept, self.loaded, max_length, self.prompt_truncated, self.prompt_cut_inside_turn,
                len(self.too_long), self.too_long[:3], advice,
            )  # fmt: skip


@dataclass
class Encoding:
    """Both splits encoded, with what fitting did to each: what `rm/tokens/prepare.py` stores and reads back."""

    train: EncodedSplit
    eval: EncodedSplit
    max_length: int
    reports: dict[str, EncodeReport]
    """{"train": ..., "eval": ...}"""

    def note(self) -> dict:
        return {"max_length": self.max_length, **{s: r.note() for s, r in self.reports.items()}}

    def warn(self) -> None:
        for split, report in self.reports.items():
            report.warn(split, self.max_length)


CHUNK = 1024
"""Pairs per batched tokenizer call (rm/tokens/ids.py)."""


def later_turn_ids(
    chunk: list[Pair], encoded: list[list[int]], many: Callable[[list[str]], list], max_length: int, prefix: list[int]
) -> dict[int, list[list[int]]]:
    """The later turns' ids of every prompt in `chunk` that must lose turns, by position, in one batched call
    rather than one per prompt (718 of 20,000 real HH prompts at max_length 512, issue 24)."""
    need = [
        k
        for k in range(len(chunk))
        if needs_later_turns(encoded[3 * k], encoded[3 * k + 1 : 3 * k + 3], max_length, prefix)
    ]
    turns = [later_turns(chunk[k].prompt, chunk[k].turn_starts) for k in need]
    ids = iter(many([t for ts in turns for t in ts]))
    return {k: [next(ids) for _ in ts] for k, ts in zip(need, turns, strict=True)}


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
    many = CheckedIds(tokenizer)  # the direct call, checked against transformers' on the first chunk

    # Redrawn at most every 10 s when stderr is a log file rather than a terminal.
    interval = 0.1 if sys.stderr.isatty() else 10.0
    bar = tqdm(total=len(pairs), desc=progress, unit="pairs", disable=not progress, mininterval=interval)
    starts = range(0, len(pairs), CHUNK)
    texts = ([t for p in pairs[s : s + CHUNK] for t in (p.prompt, p.chosen, p.rejected)] for s in starts)
    for start, encoded in zip(starts, ids_ahead(many, texts), strict=True):  # the next chunk tokenizing meanwhile
        chunk = pairs[start : start + CHUNK]
        shorter = later_turn_ids(chunk, encoded, many, max_length, prefix)
        fitted = []  # this chunk's groups as lists, gone once they are an Arrow record batch
        for k, pair in enumerate(chunk):
            prompt, chosen, rejected = encoded[3 * k : 3 * k + 3]
            report.pair_tokens.append(len(prefix) + len(prompt) + max(len(chosen), len(rejected)))
            cut = truncate_group(prompt, [chosen, rejected], max_length, prefix, lambda k=k, turns=shorter: turns[k])
            report.prompt_truncated += cut.prompt_truncated
            report.prompt_cut_inside_turn += cut.cut_inside_turn
            if cut.dropped:
                report.too_long.append(pair.origin or pair.prompt[:40])
                continue
            kept = report.kept + len(fitted)
            fitted.append(
                EncodedGroup(cut.prompt_ids, cut.response_ids, [0, 1], index[pair.subset], pair.margin or 0.0, kept)
            )
            positions.append(start + k)
        report.kept += len(fitted)
        batches.append(record_batch(fitted))
        del encoded, fitted  # before the next chunk's lists exist: one chunk of Python ints alive at a time
        bar.update(len(chunk))
    bar.close()
    report.keeps_99 = percentiles(report.pair_tokens).get("p99", 0)
    return EncodedSplit.from_batches(batches), report, np.asarray(positions, dtype=np.int64)


def encode_pairs(
    pairs: list[Pair],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    subset_names: list[str],
    progress: str = "",
) -> tuple[EncodedSplit, EncodeReport]:
    """Tokenize prompt and responses separately; fit each pair into `max_length` (rm/tokens/truncation.py).

    Texts are tokenized CHUNK pairs at a time (the same ids as one call per text), and each chunk becomes
    an Arrow record batch straight away, so no list of Python ints outlives its chunk (rm/tokens/store.py);
    `progress` names a progress bar (pairs/s), none if empty.
    """
    split, report, _ = encode_kept(pairs, tokenizer, max_length, subset_names, progress)
    return split, report


def encode_splits(
    data: LoadedData, tokenizer: PreTrainedTokenizerBase, max_length: int, subsets: list[str], progress: bool = False
) -> Encoding:
    """Both splits tokenized (progress bars if asked); `Encoding.warn` says what fitting cost."""
    train, train_report = encode_pairs(data.train, tokenizer, max_length, subsets, "tokenizing train" * progress)
    held, eval_report = encode_pairs(data.eval, tokenizer, max_length, subsets, "tokenizing eval" * progress)
    return Encoding(train, held, max_length, {"train": train_report, "eval": eval_report})


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
