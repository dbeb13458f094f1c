"""Which later-turn prompt rule 2 of rm/tokens/truncation.py keeps, found without tokenizing every later turn.

Read literally, the rule tokenizes the text from each later user turn, longest first, until one fits `room`
tokens: a prompt of T turns hands the tokenizer up to T suffixes of itself, O(T x length) characters. Turns start
at any "\\n\\nHuman:", so a client writes as many as it likes: an 84 KB /score body of 3,000 turns ran 334 s and
then the server ran out of memory. Two facts give the same prompt at a cost bounded by `room`:

1. A text of more than room x L characters has more than `room` tokens, L being the most characters one token
   stands for (`longest_token`): such candidates are skipped untokenized.
2. A later candidate, a suffix of an earlier one, has fewer tokens: it lacks at least one whole user turn with
   its tags, which no merge across the cut makes up (byte-level BPE, rm's own, splits the text before the tag's
   "Human", so the turn's tokens add up apart from the one or two newlines at the cut). So along the candidates
   "fits" changes once, from no to yes, and `TurnSearch` finds where: from the shortest candidate the length
   doubles while it fits, then bisection between the last that fitted and the first that did not. The kept
   prompt's longer neighbour is always one that did not fit (tokenized, or skipped by fact 1), as the linear rule
   would have found it.

Per prompt the tokenizer then sees at most about (5 + log2 of the candidates) x room x L characters, plus the
last turn itself where even that is too long (its newest tokens are kept, rule 3).
"""

from __future__ import annotations

import bisect
import json
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from rm.tokens.truncation import last_turn_start, turn_starts

Many = Callable[[list[str]], list]
"""texts -> their ids (no special tokens), in order."""

SAFE_NORMALIZERS = {"Prepend", "Replace", "NFD", "NFKD", "Lowercase", "NFC", "NFKC"}
"""Normalizers that keep every character (composition, NFC/NFKC, folds at most `COMPOSED` into one)."""
COMPOSED = 4
"""Characters canonical composition can turn into one: U+1F82 is the longest canonical decomposition, 4."""
SAFE_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts", "Split"}
"""Pre-tokenizers that keep every character (Split unless its behavior removes the pattern)."""
_longest: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def longest_token(tokenizer: Any) -> int | None:
    """The most characters one token stands for: the longest vocabulary entry, as stored or decoded (a byte-level
    token's bytes are at least the characters it covers). None where no such bound holds, and every candidate is
    searched: a normalizer or pre-tokenizer that drops characters (BERT's drops whitespace and control characters),
    an unknown-token id for a whole word (WordPiece, WordLevel, fused unknowns), an added token that strips the
    whitespace beside it. Computed once per tokenizer."""
    try:
        return _longest[tokenizer]
    except (KeyError, TypeError):
        pass
    bound = _bound(tokenizer)
    try:
        _longest[tokenizer] = bound
    except TypeError:  # not weakly referable: computed again next time
        pass
    return bound


def _bound(tokenizer: Any) -> int | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        spec = json.loads(backend.to_str())
    except Exception:  # noqa: BLE001 - a custom (Python) normalizer or pre-tokenizer cannot be serialized: no bound
        return None
    factor = 1
    for n in _parts(spec.get("normalizer")):
        if n["type"] not in SAFE_NORMALIZERS or (n["type"] == "Replace" and not _keeps_length(n)):
            return None
        factor = COMPOSED if n["type"] in ("NFC", "NFKC") else factor
    for p in _parts(spec.get("pre_tokenizer")):
        if p["type"] not in SAFE_PRE_TOKENIZERS or str(p.get("behavior", "")).lower() == "removed":
            return None
    model = spec["model"]
    unknown = model.get("unk_token", model.get("unk_id")) is not None and not model.get("byte_fallback")
    if model["type"] not in ("BPE", "Unigram") or (unknown and (model["type"] == "Unigram" or model.get("fuse_unk"))):
        return None
    if any(t.get("lstrip") or t.get("rstrip") for t in spec.get("added_tokens", [])):
        return None
    vocab = backend.get_vocab(with_added_tokens=True)
    decoded = backend.decode_batch([[i] for i in vocab.values()], skip_special_tokens=False)
    return factor * max(1, *map(len, vocab), *map(len, decoded))


def _keeps_length(replace: dict) -> bool:
    """A Replace normalizer that never shortens the text: a plain string replaced by one at least as long (" " by
    "▁", as SentencePiece-style tokenizers do). A regex, or a shorter replacement, drops characters, and then a
    text of more than room x L characters can still fit."""
    pattern = replace.get("pattern") or {}
    return "String" in pattern and len(replace.get("content") or "") >= len(pattern["String"])


def _parts(spec: dict | None) -> list[dict]:
    """A normalizer's or pre-tokenizer's steps: a Sequence's, or itself."""
    if spec is None:
        return []
    inner = spec.get("normalizers", spec.get("pretokenizers"))
    return [q for s in inner for q in _parts(s)] if spec["type"] == "Sequence" else [spec]


class TurnSearch:
    """The later-turn prompt the linear rule keeps for one prompt and `room`, found by probes: `probe()` names the
    next text to tokenize (None when done), `tell(ids)` gives its ids back; `result` is then what
    `truncate_group`'s `shorter_prompts` returns: [the first candidate that fits], or [the last turn's ids] where
    none fits (it keeps that turn's newest tokens), or [] for a prompt of one turn."""

    def __init__(self, prompt: str, starts: Sequence[int] | None, room: int, longest: int | None):
        self.prompt, self.room = prompt, room
        lowest = 1 if longest is None else max(1, len(prompt) - room * longest)
        self.starts = turn_starts(prompt, starts, lowest)  # the candidates (fact 1), ascending: longest first
        self.last = self.starts[-1] if self.starts else last_turn_start(prompt, starts)
        self.fit: int | None = None  # index of the longest candidate known to fit, and its ids
        self.fit_ids: list[int] = []
        self.miss = -1  # index of the shortest known not to (-1: the skipped ones before the candidates)
        self.result: list[list[int]] | None = None if self.last is not None else []
        self._next: int | None = None

    def probe(self) -> str | None:
        """The next text to tokenize, or None when `result` is known."""
        if self.result is not None:
            return None
        if not self.starts:  # every candidate is too long: only the last turn's ids are needed (rule 3)
            self._next = None
            return self.prompt[self.last :]
        if self.fit is None:
            self._next = len(self.starts) - 1  # the shortest first: if it misses, every longer one does
        elif self.miss == -1:  # doubling: the longest candidate at most twice as long as the one that fitted
            width = 2 * (len(self.prompt) - self.starts[self.fit])
            self._next = min(bisect.bisect_left(self.starts, len(self.prompt) - width), self.fit - 1)
        else:
            self._next = (self.miss + self.fit) // 2
        return self.prompt[self.starts[self._next] :]

    def tell(self, ids: list[int]) -> None:
        """The ids of the text `probe()` named."""
        k = self._next
        if k is None:
            self.result = [ids]
            return
        if len(ids) <= self.room:
            self.fit, self.fit_ids = k, ids
        elif self.fit is None:
            self.result = [ids]  # the last turn alone is too long: none fits (fact 2)
            return
        else:
            self.miss = k
        if self.fit == self.miss + 1:
            self.result = [self.fit_ids]


def search(searches: list[TurnSearch], many: Many) -> None:
    """Run `searches` to their results in rounds, one tokenizer call a round for all of them (training encodes
    the prompts of a chunk together: one call per prompt and probe costs several times more)."""
    waiting = [(s, t) for s in searches if (t := s.probe()) is not None]
    while waiting:
        for (s, _), ids in zip(waiting, many([t for _, t in waiting]), strict=True):
            s.tell(ids)
        waiting = [(s, t) for s, _ in waiting if (t := s.probe()) is not None]


def fitting_turns(prompt: str, starts: Sequence[int] | None, room: int, longest: int | None, many: Many) -> list:
    """`TurnSearch`'s result for one prompt: what `truncate_group`'s `shorter_prompts` returns."""
    one = TurnSearch(prompt, starts, room, longest)
    search([one], many)
    return one.result or []
