"""Texts to token ids in batches: the fast tokenizer's own batch call where that gives transformers' ids,
spread over the cores whatever `TOKENIZERS_PARALLELISM` says.

A fast tokenizer's batch call costs a fraction of one call per text (20,000 HH pairs took 61,229
single-text calls at about 250 us each), and calling the Rust tokenizer directly skips
transformers turning every encoding into a dict of lists (15% of the tokenizing time on 160,000 HH pairs).

`rm train` sets `TOKENIZERS_PARALLELISM=false` (as does the Makefile), which kept the Rust batch call on
one core: 1,277 pairs/s where bench_data.py, run without it, tokenized 2,772 pairs/s. The
variable is there because the Rust thread pool does not survive a fork (a forked child that used it would
hang). So the batch is split here, over Python threads (the Rust call releases the GIL): every core is
busy, the setting is left alone, and a forked child (`data.num_proc`) starts threads of its own. 20,000 real
HH pairs under TOKENIZERS_PARALLELISM=false on 2 cores: 1,998 pairs/s in one call, 3,014 split here (with
the variable unset, the Rust call's own threads: 2,996; medians of 3).
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase, TokenizersBackend

from rm.data.formats.text_rule import response_end
from rm.errors import ConfigError

THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
"""Threads a batch call is spread over: the cores this process may run on."""
MIN_SLICE = 64
"""Texts below which a share is not worth a thread (a prompt's later turns are tokenized in one call)."""


@functools.cache
def _pool(pid: int) -> ThreadPoolExecutor:
    """The threads of process `pid`: a forked child has its own (its parent's threads did not come along)."""
    return ThreadPoolExecutor(THREADS, thread_name_prefix="rm-tokenize")


OFF = ("false", "f", "off", "0", "no", "n")


def library_threads_off() -> bool:
    """Whether TOKENIZERS_PARALLELISM keeps the library's own batch call on one core. Only then does rm split the
    batch over threads: with the library's threads on too, both pools shared 2 cores and the cold run of
    scripts/bench_data.py tokenized at 3,244 pairs/s instead of 5,730."""
    return os.environ.get("TOKENIZERS_PARALLELISM", "").strip().lower() in OFF


def batch_ids(tokenizer: PreTrainedTokenizerBase, direct: bool = True) -> tuple[Callable[[list[str]], list], bool]:
    """texts -> their ids without special tokens, as `tokenizer(texts, add_special_tokens=False)["input_ids"]`
    gives them; and whether that is the direct call below.

    For a plain fast tokenizer this calls the Rust tokenizer's `encode_batch_fast` directly, in shares over
    `THREADS` threads: the same ids, in order, without transformers turning every encoding into a dict of lists
    (15% of the tokenizing time on 160,000 HH pairs) or computing offsets. Tokenizers whose class
    changes how text is encoded, or whose backend would truncate or pad, go through transformers' call;
    `CheckedIds` checks the two agree on the first texts before trusting the direct one.
    """

    def through_transformers(texts: list[str]) -> list[list[int]]:
        # verbose=False: no "Token indices sequence length is longer than the specified maximum" for a text
        # past model_max_length (an export's is its max_length): rm fits every text afterwards (truncation.py)
        return tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []

    backend = getattr(tokenizer, "_tokenizer", None)
    cls = type(tokenizer)
    plain = cls._encode_plus is TokenizersBackend._encode_plus and cls.__call__ is PreTrainedTokenizerBase.__call__
    if not (direct and plain and hasattr(backend, "encode_batch_fast")):
        return through_transformers, False

    def share(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]

    def rust(texts: list[str]) -> list[list[int]]:
        settled = backend.truncation is None and backend.padding is None
        if not settled or backend.encode_special_tokens != bool(tokenizer.split_special_tokens):
            return through_transformers(texts)
        n = min(4 * THREADS, len(texts) // MIN_SLICE)  # 4 shares a thread: texts differ in length
        if THREADS < 2 or n < 2 or not library_threads_off():
            return share(texts) if texts else []
        cuts = [len(texts) * i // n for i in range(n + 1)]
        shares = _pool(os.getpid()).map(share, [texts[a:b] for a, b in itertools.pairwise(cuts)])
        return [ids for part in shares for ids in part]

    return rust, True


class CheckedIds:
    """`batch_ids`'s call, checked: the first call's texts go through both the direct call and transformers', and
    if they disagree (a tokenizer class with steps of its own that the plain check missed) transformers' call is
    used from then on. Safe to call from several threads (`ids_ahead`)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.many, self.direct = batch_ids(tokenizer)
        self._transformers, _ = batch_ids(tokenizer, direct=False)
        self._checked = not self.direct
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> list[list[int]]:
        if not self._checked:
            with self._lock:
                if not self._checked:
                    got, want = self.many(texts), self._transformers(texts)
                    if got != want:
                        self.many, self.direct = self._transformers, False
                    self._checked = bool(texts)
                    return want
        return self.many(texts)


def ids_ahead(many: Callable[[list[str]], list], batches: Iterable[list[str]]) -> Iterator[list]:
    """`many(batch)` for each batch in order, the next batch tokenizing on a thread while the caller works on this
    one (fitting, Arrow), so the cores stay busy: 40,000 real HH pairs went from 3,941 to 4,480 pairs/s.
    The first batch is tokenized alone, so a `CheckedIds` check settles before any other batch starts; one batch
    more is alive at a time."""
    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        return
    done = many(first)
    with ThreadPoolExecutor(1, thread_name_prefix="rm-tokenize-ahead") as ahead:  # this call's: fork-safe
        for batch in batches:
            upcoming = ahead.submit(many, batch)
            yield done
            done = upcoming.result()
    yield done


@dataclass(frozen=True)
class EndOfSequence:
    """data.eos for one tokenizer: the one place where a response gets its end (rm/data/formats/text_rule.py's
    `response_end`) before it is tokenized, and where its ids are checked to end with the EOS id. Training and
    `rm eval` (rm/tokens/encode.py), `rm score`, the suites and `rm serve` (rm/evaluation/score_file.py's
    `encode_texts`) all tokenize responses through it. The truncation rule never cuts a response's end
    (rm/tokens/truncation.py), so the EOS stays the last token, where the reward is read."""

    eos: str
    """data.eos: none, eos or space_eos."""
    token: str = ""
    """The tokenizer's EOS text ('' under none)."""
    token_id: int = -1

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase, eos: str) -> EndOfSequence:
        """The convention for `tokenizer`; one that needs an EOS the tokenizer lacks is a one-line ConfigError."""
        if eos == "none":
            return cls(eos)
        token, token_id = getattr(tokenizer, "eos_token", None), getattr(tokenizer, "eos_token_id", None)
        if not token or token_id is None:
            raise ConfigError(
                f"data.eos={eos}: the tokenizer {type(tokenizer).__name__} has no eos_token; set data.eos=none, "
                "or give a tokenizer with one"
            )
        return cls(eos, token, int(token_id))

    def texts(self, responses: Sequence[str]) -> list[str]:
        """The responses' texts as tokenized: each ended by the convention."""
        if self.eos == "none":
            return list(responses)
        return [response_end(r, self.eos, self.token) for r in responses]

    def checked(self, ids: Sequence[Sequence[int]]) -> Sequence[Sequence[int]]:
        """The responses' ids, refused in one line unless each ends with the EOS id (a tokenizer that splits its
        special tokens' text, `split_special_tokens=True`, would read the EOS text as plain text)."""
        if self.eos != "none" and any(not len(r) or r[-1] != self.token_id for r in ids):
            raise ConfigError(
                f"data.eos={self.eos}: this tokenizer does not read its eos_token {self.token!r} as its id "
                f"{self.token_id} (split_special_tokens?); set data.eos=none, or give a tokenizer that does"
            )
        return ids
