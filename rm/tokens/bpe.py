"""A random-init model's tokenizer: a byte-level BPE trained on the run's training texts.

It depends on the data and the BPE settings alone (`tokenizer.vocab_size`, `tokenizer.train_pairs`, the
split seed), not on `collator.max_length`, so runs that differ only in how they fit texts share it: it is
a cache entry of its own, keyed without any tokenizer, read or built before anything is encoded. Every
process loads it from `<output_dir>/tokenizer`, where the main process put it.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from rm.config import RunConfig
from rm.config.rundir import RunDir
from rm.data.formats.group import responses_of
from rm.data.load import Example
from rm.tokens import cache
from rm.tokens.tokenizer import load_tokenizer, train_bpe

log = logging.getLogger("rm")


def bpe_texts(pairs: list[Example], n: int, seed: int) -> list[str]:
    """The texts of at most `n` training pairs or groups (a seeded sample; 0: all): 20,000 HH pairs learn an 8k
    vocabulary in about 5 s, all 160,000 in about 43 s."""
    if n and len(pairs) > n:
        pairs = random.Random(seed).sample(pairs, n)
    return [t for p in pairs for t in (p.prompt, *responses_of(p))]


def run_tokenizer_dir(cfg: RunConfig) -> Path:
    return RunDir(Path(cfg.output_dir)).tokenizer


def bpe_key(cfg: RunConfig) -> str:
    t = cfg.tokenizer
    return cache.digest(cache.data_state(cfg.data), "bpe", t.vocab_size, t.train_pairs, cfg.data.split_seed)


def train_run_bpe(cfg: RunConfig, train: list[Example], is_main: bool) -> PreTrainedTokenizerBase:
    """Trained by the main process into `<output_dir>/tokenizer`; every process loads it from there."""
    folder = run_tokenizer_dir(cfg)
    if is_main:
        started = time.perf_counter()
        texts = bpe_texts(train, cfg.tokenizer.train_pairs, cfg.data.split_seed)
        train_bpe(texts, cfg.tokenizer.vocab_size).save_pretrained(folder)
        log.info("tokenizer: byte-level BPE of %d tokens trained on %d pairs (%.1f s)", cfg.tokenizer.vocab_size,
                 len(texts) // 3, time.perf_counter() - started)  # fmt: skip
    return load_tokenizer(str(folder))


def cached_bpe(cfg: RunConfig, is_main: bool) -> PreTrainedTokenizerBase | None:
    """The run's BPE from the cache (copied into `<output_dir>/tokenizer`), or None on a miss. Processes other
    than the main one (which looked first) load the copy it made."""
    folder = run_tokenizer_dir(cfg)
    if not is_main:
        return load_tokenizer(str(folder))
    name = f"tokenizer-{bpe_key(cfg)}"
    entry = cache.find(cache.cache_root(cfg.data), name)
    if entry is None:
        return None
    shutil.copytree(entry, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(cache.MARKER))
    log.info("tokenizer: from cache %s", entry)
    return load_tokenizer(str(folder))


def store_bpe(cfg: RunConfig) -> None:
    """The BPE just trained into `<output_dir>/tokenizer`, as a cache entry (a failure only warns)."""
    root, name = cache.cache_root(cfg.data), f"tokenizer-{bpe_key(cfg)}"
    try:
        with cache.building(root, name) as tmp:  # a failed copy leaves no temporary folder behind
            shutil.copytree(run_tokenizer_dir(cfg), tmp, dirs_exist_ok=True)
            cache.publish(tmp, name)
    except OSError as e:
        log.warning("tokenizer: not cached (%s)", e)
