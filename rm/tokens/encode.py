"""Pairs to encoded groups: each prompt tokenized once, each group fitted into `collator.max_length`.

Encoding happens once before training, so epochs and evals reuse the ids. Keeping the prompt and the
responses as separate id sequences is what lets a layout share the prompt between them (`rm/collate/`);
the padded layout simply concatenates them. A split is an `EncodedSplit`: Arrow columns of int32 ids, not
Python lists (rm/tokens/store.py). The fitting rule is `rm/tokens/truncation.py`'s, the one `rm score` uses too.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import logging
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from rm.data.formats.attributes import attribute_names as report_attribute_names
from rm.data.formats.group import attributes_of, pairs_of, rank_of, responses_of, scores_of
from rm.data.formats.pair import NO_LABELS
from rm.data.heap import trim_heap
from rm.data.labels import registered
from rm.data.load import Example, LoadedData
from rm.errors import ConfigError
from rm.tokens.encode_report import EncodeReport, percentiles
from rm.tokens.ids import CheckedIds, EndOfSequence, ids_ahead
from rm.tokens.steps.step_encode import encode_step_groups, has_steps
from rm.tokens.store import OPTIONAL, EncodedGroup, EncodedSplit, record_batch
from rm.tokens.tokenizer import special_prefix
from rm.tokens.truncation import Fit, fit_group, search_room
from rm.tokens.turn_search import TurnSearch, longest_token, search

log = logging.getLogger("rm")

__all__ = ["EncodeReport", "Encoding", "encode_kept", "encode_pairs", "encode_splits", "hand_back_memory",
           "percentiles", "release_texts"]  # fmt: skip


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
"""Groups (pairs) per batched tokenizer call (rm/tokens/ids.py)."""
TRIM_CHUNKS = 8
"""Chunks between handing the C heap's freed pages back when encoding consumes its pairs."""


def prompt_id(prompt: str) -> int:
    """A 64-bit id of the prompt text, the same in every process and share (`data.num_proc`): eval resamples
    prompts by it. Collisions are about 1e-9 likely among 160,000 prompts."""
    return int.from_bytes(hashlib.blake2b(prompt.encode(), digest_size=8).digest(), "little", signed=True)


def texts_of(items: list[Example], end: EndOfSequence) -> tuple[list[str], list[int]]:
    """Every item's prompt then its responses (ended by data.eos), flat, and where each item's texts start."""
    texts, starts = [], [0]
    for item in items:
        texts.append(item.prompt)
        texts += end.texts(responses_of(item))
        starts.append(len(texts))
    return texts, starts


def later_turn_ids(
    chunk: list[Example], encoded: list[list[int]], starts: list[int], many: Callable[[list[str]], list],
    max_length: int, prefix: list[int], longest: int | None,
) -> dict[int, list[list[int]]]:  # fmt: skip
    """What `fit_group` reads of the later turns of every prompt in `chunk` that must lose turns, by position: the
    ids of the one the rule keeps (`rm.tokens.turn_search`), the prompts' probes batched, one tokenizer call a
    round rather than one per prompt (718 of 20,000 real HH prompts at max_length 512)."""
    searches = {}
    for k in range(len(chunk)):
        room = search_room(encoded[starts[k]], encoded[starts[k] + 1 : starts[k + 1]], max_length, prefix)
        if room is not None:
            searches[k] = TurnSearch(chunk[k].prompt, chunk[k].turn_starts, room, longest)
    search(list(searches.values()), many)
    return {k: s.result or [] for k, s in searches.items()}


def fitted_group(
    item: Example, prompt: list[int], responses: list[list[int]], max_length: int, prefix: list[int],
    shorter: Callable[[int], list], report: EncodeReport,
) -> tuple[list[int], list[list[int]], list[int]] | None:  # fmt: skip
    """(prompt ids, responses kept, their positions in the item), or None when the group is dropped (`Fit.DROP`:
    a response with no room left for a prompt token leaves its group, counted, and a group with no comparison
    left goes)."""
    fit = fit_group(
        prompt, responses, max_length, prefix, shorter, Fit.DROP, lambda keep: comparisons_among(item, keep)
    )
    if fit.dropped:
        return None
    report.responses_dropped += fit.responses_dropped
    report.prompt_truncated += fit.prompt_truncated
    report.prompt_cut_inside_turn += fit.cut_inside_turn
    (part,) = fit.parts
    return part.prompt_ids, part.response_ids, fit.kept


def comparisons_among(item: Example, keep: list[int]) -> bool:
    """Whether the responses `keep` still compare: two of them ordered (or tied, as the item says)."""
    explicit = pairs_of(item)
    if explicit is not None:
        return any(a in keep and b in keep for a, b, _ in explicit)
    return len(keep) >= 2


def encoded_group(
    item: Example, fitted: tuple[list[int], list[list[int]], list[int]], subset_id: int, index: int,
    names: Sequence[str] = (), keep_origin: bool = True, labels: Mapping | None = None,
) -> EncodedGroup:  # fmt: skip
    """The item's kept responses with their ranks, scores and comparisons renumbered to the kept positions, and
    their attribute scores of `names`, flat [responses x names] (NaN where missing); its origin where
    `keep_origin`, and the values of the registered `labels` (rm/data/labels.py)."""
    prompt, responses, keep = fitted
    rank, scores, explicit, scored = rank_of(item), scores_of(item), pairs_of(item), attributes_of(item)
    at = {k: n for n, k in enumerate(keep)}
    flat = [] if explicit is None else [x for a, b, tie in explicit if a in at and b in at for x in (at[a], at[b], tie)]
    return EncodedGroup(
        prompt,
        responses,
        [rank[k] for k in keep],
        subset_id,
        margin=getattr(item, "margin", None) or 0.0,
        index=index,
        scores=[scores[k] for k in keep] if scores is not None else [],
        pairs=flat,
        prompt_id=prompt_id(item.prompt),
        attributes=[(scored[k] if scored else {}).get(n, math.nan) for k in keep for n in names] if names else (),
        target=target if (target := getattr(item, "target", None)) is not None else math.nan,
        strength=strength if (strength := getattr(item, "strength", None)) is not None else math.nan,
        cycle=getattr(item, "cycle", ""),
        origin=item.origin if keep_origin else "",
        labels=group_labels(item.labels, prompt, responses, keep, labels) if labels else NO_LABELS,
    )


def group_labels(parsed: Mapping, prompt: list[int], responses: list, keep: list[int], labels: Mapping) -> dict:
    """A group's registered labels: those parsed (per response: of the kept ones), those derived from the ids."""
    out = {}
    for name, label in labels.items():
        if label.derive is not None:
            value = label.derive(prompt, responses)
            out[name] = list(map(float, value)) if label.level == "response" else float(value)
        elif name in parsed:
            value = parsed[name]
            out[name] = [value[k] for k in keep] if label.level == "response" else value
    return out


def encode_kept(
    pairs: list[Example],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    subset_names: list[str],
    progress: str = "",
    consume: bool = False,
    attribute_names: Sequence[str] | None = None,
    eos: str = "none",
) -> tuple[EncodedSplit, EncodeReport, np.ndarray]:
    """`encode_pairs`, and the position in `pairs` of each group kept (eval lists the dropped ones by pair).

    `attribute_names`: whose scores each group stores, flat [responses x names] (NaN where missing): a run's are
    every name its data has (rm/data/formats/attributes.py), `rm eval`'s the model's; None: those `pairs` give.

    `consume`: the caller hands `pairs` over; each chunk's items leave the list once encoded (it ends empty), so
    their texts are freed while the ids grow: the cold run of scripts/bench_data.py on the real-HH variant
    peaked at 1.10 GiB during encoding with the texts held to the end. `eos`: data.eos, how each response ends
    (rm/tokens/ids.py's `EndOfSequence`)."""
    end = EndOfSequence.of(tokenizer, eos)
    if has_steps(pairs):  # stepwise data: each step is scored at its own last token, and no EOS follows a step
        if eos != "none":
            raise ConfigError(f"data.eos={eos}: stepwise data is scored at each step's end; set data.eos=none")
        return encode_step_groups(pairs, tokenizer, max_length, subset_names, prompt_id, progress)
    prefix, index, report = special_prefix(tokenizer), {name: i for i, name in enumerate(subset_names)}, EncodeReport()
    batches, positions = [], []
    if attribute_names is None:  # every name the items give
        attribute_names = sorted({n for p in pairs for s in attributes_of(p) or () for n in s})
    targeted = bool(pairs) and getattr(pairs[0], "target", None) is not None  # rm eval under loss.strength=soft
    found = {"strength": any(getattr(p, "strength", None) is not None for p in pairs), "target": targeted,
             "attributes": bool(attribute_names), "cycle": any(getattr(p, "cycle", "") for p in pairs)}  # fmt: skip
    optional = [name for name in OPTIONAL if found.get(name)]  # one schema for every chunk of the split
    labels = registered()  # a column each in every split, NaN where an item has none: one schema for all
    # Origins name bad records found after the cache (loss_labels.py): a split without what makes one stores "".
    keep_origin = found["strength"] or found["attributes"] or found["cycle"]
    many = CheckedIds(tokenizer)  # the direct call, checked against transformers' on the first chunk
    longest = longest_token(tokenizer)

    # Redrawn at most every 10 s when stderr is a log file rather than a terminal.
    interval = 0.1 if sys.stderr.isatty() else 10.0
    bar = tqdm(total=len(pairs), desc=progress, unit="pairs", disable=not progress, mininterval=interval)
    chunks = [texts_of(pairs[s : s + CHUNK], end) for s in range(0, len(pairs), CHUNK)]
    texts = (t for t, _ in chunks)
    for n, encoded in enumerate(ids_ahead(many, texts)):  # the next chunk tokenizing meanwhile
        start, starts = n * CHUNK, chunks[n][1]
        chunk = pairs[start : start + CHUNK]
        shorter = later_turn_ids(chunk, encoded, starts, many, max_length, prefix, longest)
        fitted = []  # this chunk's groups as lists, gone once they are an Arrow record batch
        for k, item in enumerate(chunk):
            prompt, responses = encoded[starts[k]], end.checked(encoded[starts[k] + 1 : starts[k + 1]])
            report.pair_tokens.append(len(prefix) + len(prompt) + max(len(r) for r in responses))
            fit = fitted_group(item, prompt, responses, max_length, prefix, lambda _, k=k, s=shorter: s[k], report)
            if fit is None:
                report.too_long.append(item.origin or item.prompt[:40])
                continue
            fitted.append(encoded_group(
                item, fit, index[item.subset], report.kept + len(fitted), attribute_names, keep_origin, labels
            ))  # fmt: skip
            positions.append(start + k)
        report.kept += len(fitted)
        batches.append(record_batch(fitted, optional, list(labels)))
        del encoded, fitted  # before the next chunk's lists exist: one chunk of Python ints alive at a time
        chunks[n] = ([], starts)
        if consume:
            pairs[start : start + len(chunk)] = itertools.repeat(None, len(chunk))
            if n % TRIM_CHUNKS == TRIM_CHUNKS - 1:
                trim_heap()  # the texts' large strings live in the C heap: hand the freed pages back
        bar.update(len(chunk))
    bar.close()
    if consume:
        pairs.clear()
    report.keeps_99 = percentiles(report.pair_tokens).get("p99", 0)
    return EncodedSplit.from_batches(batches), report, np.asarray(positions, dtype=np.int64)


def encode_pairs(
    pairs: list[Example],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    subset_names: list[str],
    progress: str = "",
    consume: bool = False,
    attribute_names: Sequence[str] | None = None,
    eos: str = "none",
) -> tuple[EncodedSplit, EncodeReport]:
    """Tokenize prompt and responses separately; fit each pair into `max_length` (rm/tokens/truncation.py).

    Texts are tokenized CHUNK pairs at a time (the same ids as one call per text), and each chunk becomes
    an Arrow record batch straight away, so no list of Python ints outlives its chunk (rm/tokens/store.py);
    `progress` names a progress bar (pairs/s), none if empty; `consume`, `attribute_names` and `eos` as
    `encode_kept`'s."""
    split, report, _ = encode_kept(pairs, tokenizer, max_length, subset_names, progress, consume, attribute_names, eos)
    return split, report


def encode_splits(
    data: LoadedData, tokenizer: PreTrainedTokenizerBase, max_length: int, subsets: list[str], progress: bool = False,
    consume: bool = False, attribute_names: Sequence[str] | None = None, eos: str = "none",
) -> Encoding:  # fmt: skip
    """Both splits tokenized (progress bars if asked); `Encoding.warn` says what fitting cost. `consume`: the
    splits' pairs leave `data` as they are encoded (`encode_kept`), for a caller that reads only the ids after.
    Both store the attribute scores of every name the data's report found (or of `attribute_names`); `eos`: data.eos."""
    names = attribute_names if attribute_names is not None else report_attribute_names(data.report)
    train, train_report = encode_pairs(
        data.train, tokenizer, max_length, subsets, "tokenizing train" * progress, consume, names, eos
    )
    held, eval_report = encode_pairs(
        data.eval, tokenizer, max_length, subsets, "tokenizing eval" * progress, consume, names, eos
    )
    return Encoding(train, held, max_length, {"train": train_report, "eval": eval_report})


def release_texts(data: LoadedData) -> None:
    """Drop the text pairs once both splits are encoded, and hand the freed heap back to the OS.

    On 160,000 + 8,000 HH pairs the texts hold about 330 MiB that training never reads again. Most of
    it is in strings too large for Python's small-object allocator, which glibc keeps after they are
    freed: RSS fell by 40 MiB without `malloc_trim`, by 190 MiB with it. The report stays.
    """
    data.train, data.eval = [], []
    hand_back_memory()


def hand_back_memory() -> None:
    """Collect, then return free pages to the OS from Arrow's own allocator (which keeps freed tables' pages
    otherwise) and from the C heap."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    trim_heap()
