"""The run's data made ready for training, as one function of the config: pairs loaded, the tokenizer (the
named one, or a BPE trained on the pairs), both splits encoded, the data report.

    key -> hit: read the entry | miss: load -> tokenizer -> encode -> write the entry

The key (`data_key`) is every input that changes the result: the data's source and options, the tokenizer's
serialized state and `collator.max_length`. A random-init model's BPE is read or built first (below:
keyed by the data and BPE settings alone), so the key is known before anything is encoded; the pairs are
loaded at most once, by whichever step misses first. The BPE does not depend on `collator.max_length`, so runs
that differ only in how they fit texts share it; every process loads it from `<output_dir>/tokenizer`.
Entries: rm/tokens/entry.py; folders: rm/tokens/cache.py.

Under several processes `first` is the accelerator's `main_process_first`: the main process builds the
entries, the others then find them (or, with `data.cache=false`, load and encode as before).

`data.num_proc` encodes over several forked processes, each on a contiguous share of both splits (the same
groups, indices and report as one process). On 2 cores it does not pay: the fast tokenizer's batch call already
runs on both, and 2 processes took 12.9 and 9.0 s where one took 10.3 and 8.2 s for 20,000 HH pairs.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import random
import shutil
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from rm.config import RunConfig
from rm.config.rundir import RunDir
from rm.data import labels
from rm.data.data_report import DataReport
from rm.data.formats.attributes import attribute_names
from rm.data.formats.group import responses_of
from rm.data.load import Example, LoadedData, load_data, subset_counts
from rm.tokens import cache
from rm.tokens.encode import EncodeReport, Encoding, encode_splits, hand_back_memory, release_texts
from rm.tokens.entry import Prepared, read_entry, read_splits, write_entry
from rm.tokens.store import OPTIONAL, EncodedSplit, schema_with, split_to_table
from rm.tokens.tokenizer import load_tokenizer, train_bpe

log = logging.getLogger("rm")


def prepare_data(
    cfg: RunConfig,
    tokenizer: PreTrainedTokenizerBase | None,
    first: Callable[[], AbstractContextManager] = nullcontext,
    is_main: bool = True,
    require: Callable[[dict], None] = lambda counts: None,
) -> Prepared:
    """The run's data and tokenizer. `tokenizer`: the one the run names (its chat template renders message
    lists) or a finished run's own; None: the run's BPE, from the cache or trained on the pairs. `require`
    raises when the loss needs a label the data lacks (the data report's `labels`): called once the pairs are
    loaded, before anything is tokenized, or on what a cache entry's report says."""

    def checked_load(tokenizer: PreTrainedTokenizerBase | None) -> LoadedData:
        loaded = load(cfg, source, tokenizer)
        require(loaded.report.notes.get("labels", {}))  # before a BPE is trained or anything is tokenized
        return loaded

    with first():
        source = write_synthetic(cfg, is_main)
        loaded = None
        if tokenizer is None and cfg.data.cache:
            tokenizer = cached_bpe(cfg, is_main)
        if tokenizer is None:
            loaded = checked_load(None)
            tokenizer = train_run_bpe(cfg, loaded.train, is_main)
            if cfg.data.cache and is_main:
                store_bpe(cfg)
    if not cfg.data.cache:
        return encoded(cfg, loaded or checked_load(tokenizer), tokenizer, is_main)
    with first():
        key = data_key(cfg, tokenizer)
        root, name = cache.cache_root(cfg.data), f"data-{key}"
        entry = cache.find(root, name)
        if entry is not None:
            try:
                data = read_entry(entry, tokenizer, generated_dir(cfg))
            except Exception as e:  # noqa: BLE001 - any failure to load is a miss: rebuilt below
                cache.unusable(entry, e)
            else:
                log.info("data: tokenized pairs from cache %s (key %s)", entry, key)
                require(data.report.notes.get("labels", {}))
                data.encoding.warn()
                return data
        data = encoded(cfg, loaded or checked_load(tokenizer), tokenizer, is_main)
        store(data, root, name, generated_dir(cfg))
        return data


def write_synthetic(cfg: RunConfig, is_main: bool) -> RunConfig:
    """The config to load from: the generated data written once into `<output_dir>/data` (by the main process)
    and named by its path, or the config as it is."""
    if cfg.data.source != "synthetic":
        return cfg
    folder = RunDir(Path(cfg.output_dir)).data
    if is_main:
        from rm.data import synthetic

        s = cfg.data.synthetic
        synthetic.write_dataset(folder, s.n_train, s.n_eval, s.seed)
    return replace(cfg, data=replace(cfg.data, source=str(folder)))


def load(cfg: RunConfig, source: RunConfig, tokenizer: PreTrainedTokenizerBase | None) -> LoadedData:
    """The pairs as the config asks; message lists rendered with the named tokenizer's chat template (a run
    that names none renders HH text, also when it re-reads its data with the BPE it trained)."""
    named = cfg.tokenizer.name_or_path or cfg.model.name_or_path
    out, named_tokenizer = Path(cfg.output_dir), tokenizer if named else None
    loaded = load_data(source.data, out, named_tokenizer)
    grouped = any(len(responses_of(x)) > 2 for x in (*loaded.train, *loaded.eval))
    unit = "groups" if grouped else "pairs"
    log.info("data: %d train + %d eval %s loaded", len(loaded.train), len(loaded.eval), unit)
    return loaded


def data_key(cfg: RunConfig, tokenizer: PreTrainedTokenizerBase) -> str:
    """The encoded splits' key: the data's inputs, the tokenizer's serialized state and `collator.max_length`."""
    state = (cache.data_state(cfg.data), cache.tokenizer_state(tokenizer), cfg.collator.max_length)
    return cache.digest(*state, *labels.fingerprint())


def encoded(cfg: RunConfig, loaded: LoadedData, tokenizer: PreTrainedTokenizerBase, progress: bool) -> Prepared:
    """Both splits tokenized from the loaded pairs; what fitting cost is said and goes into the report."""
    counts = {"train": subset_counts(loaded.train), "eval": subset_counts(loaded.eval)}
    subsets = sorted(set(counts["train"]) | set(counts["eval"]))
    max_length, n = cfg.collator.max_length, cfg.data.num_proc
    if n > 1:
        encoding = encode_in_processes(loaded, tokenizer, max_length, subsets, n, cfg.data.eos)
    else:
        encoding: Encoding = encode_splits(
            loaded, tokenizer, max_length, subsets, progress, consume=True, eos=cfg.data.eos
        )
    encoding.warn()
    loaded.report.notes["encoding"] = encoding.note()
    release_texts(loaded)  # training reads only the ids from here on
    return Prepared(tokenizer, encoding, subsets, loaded.report, counts)


def store(data: Prepared, root: Path, name: str, here: str | None) -> None:
    """Write the entry; from then on the splits are its memory-mapped files, as in a cached run (the heap copy
    goes: 140 MiB for 160,000 HH pairs, and only the pages training touches are resident)."""
    try:
        with cache.building(root, name) as tmp:  # a failed write (a full disk) leaves no temporary folder behind
            write_entry(data, tmp, here)
            entry = cache.publish(tmp, name)
        log.info("data: cache written to %s", entry)
        data.encoding.train, data.encoding.eval = read_splits(entry)
        hand_back_memory()  # the heap copy, freed into Arrow's pool: 0.18 GiB handed back on the real-HH variant
    except OSError as e:
        log.warning("data: tokenized pairs not cached (%s); set data.cache_dir or data.cache=false", e)


def generated_dir(cfg: RunConfig) -> str | None:
    """Where the synthetic source is written, as its origins spell it in JSON (None: another source)."""
    return json.dumps(str(RunDir(Path(cfg.output_dir)).data))[1:-1] if cfg.data.source == "synthetic" else None


def _encode_share(job: tuple) -> tuple[pa.Table, pa.Table, EncodeReport, EncodeReport]:
    train, held, tokenizer, max_length, subsets, names, eos = job
    loaded = LoadedData(train, held, DataReport())
    done = encode_splits(loaded, tokenizer, max_length, subsets, attribute_names=names, eos=eos)
    return split_to_table(done.train), split_to_table(done.eval), done.reports["train"], done.reports["eval"]


def _renumbered(tables: list[pa.Table]) -> EncodedSplit:
    """The shares' tables as one split, each group's `index` its position in the whole; a column that only some
    shares have (a strength, a cycle) filled in the others (NaN, "")."""
    tables = [t for t in tables if t.num_rows] or tables[:1]  # an empty share: no attributes
    names = {n for t in tables for n in t.schema.names}
    found = [n for n in tables[0].schema.names if n in labels.registered()]
    schema = schema_with([n for n in OPTIONAL if n in names], found)
    for k, t in enumerate(tables):
        for name in (n for n in ("strength", "target", "cycle") if n in names and n not in t.schema.names):
            fill = "" if name == "cycle" else math.nan
            t = t.append_column(name, pa.array([fill] * t.num_rows, OPTIONAL[name]))
        tables[k] = t.select(schema.names)
    table = pa.concat_tables(tables)
    index = pa.array(range(table.num_rows), pa.int64())
    return EncodedSplit(table.set_column(table.schema.get_field_index("index"), "index", index))


def encode_in_processes(
    loaded: LoadedData, tokenizer: PreTrainedTokenizerBase, max_length: int, subsets: list[str], n: int, eos: str
) -> Encoding:
    def share(pairs: list, i: int) -> list:
        return pairs[len(pairs) * i // n : len(pairs) * (i + 1) // n]

    names = attribute_names(loaded.report)  # every share stores the whole data's names
    jobs = [(share(loaded.train, i), share(loaded.eval, i), tokenizer, max_length, subsets, names, eos)
            for i in range(n)]  # fmt: skip
    with multiprocessing.get_context("fork").Pool(n) as pool:
        shares = pool.map(_encode_share, jobs)
    reports = {split: EncodeReport.merged([s[2 + k] for s in shares]) for k, split in enumerate(("train", "eval"))}
    return Encoding(_renumbered([s[0] for s in shares]), _renumbered([s[1] for s in shares]), max_length, reports)


# A random-init model's tokenizer, a cache entry of its own.
def bpe_texts(pairs: list[Example], n: int, seed: int) -> list[str]:
    """The texts of at most `n` training pairs or groups (a seeded sample; 0: all): 20,000 HH pairs learn an 8k
    vocabulary in about 5 s, all 160,000 in about 43 s."""
    if n and len(pairs) > n:
        pairs = random.Random(seed).sample(pairs, n)
    return [t for p in pairs for t in (p.prompt, *responses_of(p))]


def run_tokenizer_dir(cfg: RunConfig) -> Path:
    return RunDir(Path(cfg.output_dir)).tokenizer


def bpe_key(cfg: RunConfig) -> str:
    """The BPE's key: the data and BPE settings, not data.eos (the BPE learns the texts as written)."""
    t = cfg.tokenizer
    data = cache.data_state(replace(cfg.data, eos="none"))
    return cache.digest(data, "bpe", t.vocab_size, t.train_pairs, cfg.data.split_seed)


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
