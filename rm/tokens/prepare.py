"""The run's data made ready for training: pairs loaded, the tokenizer (trained on them for a random-init
model), both splits encoded, the data report: from the tokenized-data cache (`rm/tokens/cache.py`) when the
same inputs were prepared before, else from the source (and then stored).

A cached run reads no source text at all, so an entry holds everything the run takes from it: the encoded
splits, the subset names, the pairs counted per subset as loaded, and the `DataReport` (data_report.json and
skipped.jsonl come out byte for byte as from the source). A random-init model's BPE, derived from the data
and `tokenizer.vocab_size` alone, is an entry of its own, keyed without any tokenizer; the splits' key then
includes the tokenizer's serialized state, `collator.max_length` and every data option.

Under several processes `first` is the accelerator's `main_process_first`: the main process builds the
entries, the others then find them (or, with `data.cache=false`, load and encode as before).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from rm.config import RunConfig
from rm.data.data_report import BadRecord, DataReport
from rm.data.formats.pair import Pair
from rm.data.load import LoadedData, load_data, subset_counts
from rm.tokens import cache
from rm.tokens.encode import EncodedSplit, encode_splits, release_texts
from rm.tokens.tokenizer import load_tokenizer, train_bpe

log = logging.getLogger("rm")


@dataclass
class Prepared:
    """What a run takes from its data."""

    tokenizer: PreTrainedTokenizerBase
    train: EncodedSplit
    eval: EncodedSplit
    subsets: list[str]
    report: DataReport
    """What loading and encoding skipped, repaired and changed (the run writes it out)."""
    loaded: dict[str, dict[str, int]]
    """Pairs per subset of each split as loaded, before encoding dropped any: {"train": {...}, "eval": {...}}."""


def prepare_data(
    cfg: RunConfig,
    chat_tokenizer: PreTrainedTokenizerBase | None,
    first: Callable[[], AbstractContextManager] = nullcontext,
    is_main: bool = True,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> Prepared:
    """The run's data and tokenizer; `chat_tokenizer` is the named tokenizer (None: train a BPE, unless
    `tokenizer` gives the one a finished run trained)."""
    if not cfg.data.cache:
        with first():
            loaded = load_data(cfg.data, Path(cfg.output_dir), chat_tokenizer)
        with first():
            tokenizer = tokenizer or chat_tokenizer or run_bpe(cfg, loaded.train, is_main)
        data = encoded(cfg, loaded, tokenizer, is_main)
        release_texts(loaded)
        return data
    with first():
        return cached(cfg, chat_tokenizer, is_main, tokenizer)


def cached(
    cfg: RunConfig, chat_tokenizer: PreTrainedTokenizerBase | None, is_main: bool, tokenizer: Any = None
) -> Prepared:
    out, root = Path(cfg.output_dir), cache.cache_root(cfg.data)
    if cfg.data.source == "synthetic" and is_main:  # its files land in the run directory either way
        from rm.data import synthetic

        s = cfg.data.synthetic
        synthetic.write_dataset(out / "data", s.n_train, s.n_eval, s.seed)
    state = cache.data_state(cfg.data)
    loaded: LoadedData | None = None

    def load() -> LoadedData:
        nonlocal loaded
        loaded = loaded or load_data(cfg.data, out, chat_tokenizer)
        return loaded

    tokenizer = tokenizer or chat_tokenizer or cached_bpe(cfg, root, state, load, is_main)
    key = data_key(cfg, tokenizer)
    name = f"data-{key}"
    entry = cache.find(root, name)
    if entry is not None:
        try:
            data = read_entry(entry, tokenizer, generated_dir(cfg))
        except Exception as e:  # noqa: BLE001 - any failure to load is a miss: rebuilt below
            cache.unusable(entry, e)
        else:
            log.info("data: tokenized pairs from cache %s (key %s)", entry, key)
            replay_encoding_warnings(data.report)
            return data
    data = encoded(cfg, load(), tokenizer, is_main)
    try:
        tmp = cache.new_entry(root, name)
        write_entry(data, tmp, generated_dir(cfg))
        entry = cache.publish(tmp, name)
        log.info("data: cache written to %s", entry)
        # From here on the splits are the entry's memory-mapped files, as in a cached run: the heap copy
        # goes (140 MiB for 160,000 HH pairs) and only the pages training touches are resident.
        data.train, data.eval = read_splits(entry)
    except OSError as e:
        log.warning("data: tokenized pairs not cached (%s); set data.cache_dir or data.cache=false", e)
    release_texts(load())  # training reads only the ids from here on
    return data


def replay_encoding_warnings(report: DataReport) -> None:
    """What tokenizing warned about (prompts truncated, pairs dropped), said again for a cached run."""
    encoding = report.notes.get("encoding", {})
    for split in ("train", "eval"):
        n = encoding.get(split, {})
        if n.get("prompt_truncated") or n.get("dropped_too_long"):
            log.warning(
                "%s: %d prompts lost leading turns to fit max_length=%d (%d cut inside their last turn); "
                "%d pairs dropped (responses alone too long), first: %s",
                split, n["prompt_truncated"], encoding.get("max_length"), n.get("prompt_cut_inside_turn", 0),
                n["dropped_too_long"], n.get("dropped_too_long_origins", [])[:3],
            )  # fmt: skip


def data_key(cfg: RunConfig, tokenizer: PreTrainedTokenizerBase) -> str:
    """The encoded splits' key: the data's inputs, the tokenizer's serialized state and `collator.max_length`."""
    state = cache.data_state(cfg.data)
    return cache.digest(state, cache.tokenizer_state(tokenizer), cfg.collator.max_length)


def encoded(cfg: RunConfig, loaded: LoadedData, tokenizer: PreTrainedTokenizerBase, progress: bool) -> Prepared:
    """Both splits tokenized from the loaded pairs (what truncation cost goes into the report)."""
    counts = {"train": subset_counts(loaded.train), "eval": subset_counts(loaded.eval)}
    subsets = sorted(set(counts["train"]) | set(counts["eval"]))
    if cfg.data.num_proc > 1:
        train, held = encode_in_processes(loaded, tokenizer, cfg.collator.max_length, subsets, cfg.data.num_proc)
    else:
        train, held = encode_splits(loaded, tokenizer, cfg.collator.max_length, subsets, progress)
    return Prepared(tokenizer, train, held, subsets, loaded.report, counts)


def _encode_shard(job: tuple) -> tuple:
    """One process's share: (train table, eval table, its encoding notes)."""
    train, held, tokenizer, max_length, subsets = job
    shard = LoadedData(train, held, DataReport())
    train_set, eval_set = encode_splits(shard, tokenizer, max_length, subsets)
    return cache.split_to_table(train_set), cache.split_to_table(eval_set), shard.report.notes["encoding"]


def _merged(notes: list[dict]) -> dict:
    """Shards' encoding notes as one split's: counts added, origin lists joined in order."""
    merged = {}
    for key, first in notes[0].items():
        values = [n[key] for n in notes]
        merged[key] = sum(values) if isinstance(first, int) else [x for v in values for x in v]
    return merged


def encode_in_processes(
    loaded: LoadedData, tokenizer: PreTrainedTokenizerBase, max_length: int, subsets: list[str], n: int
) -> tuple[EncodedSplit, EncodedSplit]:
    """`encode_splits` over `n` forked processes, each on a contiguous share of both splits: the same pairs,
    indices and report (data.num_proc). On 2 cores it does not pay: the fast tokenizer's batch call already
    runs on both, and 2 processes took 12.9 and 9.0 s where one took 10.3 and 8.2 s for 20,000 HH pairs (issue 12)."""
    import multiprocessing

    def share(pairs: list, i: int) -> list:
        return pairs[len(pairs) * i // n : len(pairs) * (i + 1) // n]

    jobs = [(share(loaded.train, i), share(loaded.eval, i), tokenizer, max_length, subsets) for i in range(n)]
    with multiprocessing.get_context("fork").Pool(n) as pool:
        shards = pool.map(_encode_shard, jobs)
    splits = []
    for k in (0, 1):
        table = pa.concat_tables([s[k] for s in shards])
        index = pa.array(range(table.num_rows), pa.int64())
        splits.append(cache.split_from_table(table.set_column(table.schema.get_field_index("index"), "index", index)))
    notes = loaded.report.notes.setdefault("encoding", {"max_length": max_length})
    for split in ("train", "eval"):
        notes[split] = _merged([s[2][split] for s in shards])
    return splits[0], splits[1]


HERE = "<rm: this run's generated data>"
"""Stands for `<output_dir>/data` in a synthetic entry's report (the file:line origins of dropped pairs), so
one entry serves every run directory with the same generator settings (a sweep's trials)."""


def generated_dir(cfg: RunConfig) -> str | None:
    """Where `load_data` writes the synthetic source, as its origins spell it in JSON (None: another source)."""
    return json.dumps(str(Path(cfg.output_dir) / "data"))[1:-1] if cfg.data.source == "synthetic" else None


def write_entry(data: Prepared, folder: Path, here: str | None = None) -> None:
    cache.write_table(cache.split_to_table(data.train), folder / "train.arrow")
    cache.write_table(cache.split_to_table(data.eval), folder / "eval.arrow")
    meta = json.dumps({"subsets": data.subsets, "loaded": data.loaded, "report": asdict(data.report)})
    (folder / "meta.json").write_text(meta.replace(here, HERE) if here else meta)


def read_entry(folder: Path, tokenizer: PreTrainedTokenizerBase, here: str | None = None) -> Prepared:
    meta = (folder / "meta.json").read_text()
    meta = json.loads(meta.replace(HERE, here) if here else meta)
    report = meta["report"]
    report["skipped"] = [BadRecord(**b) for b in report["skipped"]]
    report["repaired"] = [BadRecord(**b) for b in report["repaired"]]
    train, held = read_splits(folder)
    return Prepared(tokenizer, train, held, meta["subsets"], DataReport(**report), meta["loaded"])


def read_splits(folder: Path) -> tuple[EncodedSplit, EncodedSplit]:
    """An entry's (train, eval) splits, memory-mapped."""
    return tuple(cache.split_from_table(cache.read_table(folder / f"{s}.arrow")) for s in ("train", "eval"))


# ---- a BPE trained on the training texts (random-init models) ----


def bpe_texts(pairs: list[Pair], n: int, seed: int) -> list[str]:
    """The texts of at most `n` training pairs (a seeded sample; 0: all): 20,000 HH pairs learn an 8k
    vocabulary in about 5 s, all 160,000 in about 43 s (issue 12)."""
    if n and len(pairs) > n:
        pairs = random.Random(seed).sample(pairs, n)
    return [t for p in pairs for t in (p.prompt, p.chosen, p.rejected)]


def run_bpe(cfg: RunConfig, train: list[Pair], is_main: bool) -> PreTrainedTokenizerBase:
    """Trained by the main process into `<output_dir>/tokenizer`; every process loads it from there."""
    folder = Path(cfg.output_dir) / "tokenizer"
    if is_main:
        texts = bpe_texts(train, cfg.tokenizer.train_pairs, cfg.data.split_seed)
        train_bpe(texts, cfg.tokenizer.vocab_size).save_pretrained(folder)
    return load_tokenizer(str(folder))


def cached_bpe(
    cfg: RunConfig, root: Path, state: dict, load: Callable[[], LoadedData], is_main: bool
) -> PreTrainedTokenizerBase:
    """`run_bpe`, the main process first looking for the same data's tokenizer in the cache."""
    folder = Path(cfg.output_dir) / "tokenizer"
    if not is_main:
        return load_tokenizer(str(folder))
    t = cfg.tokenizer
    key = cache.digest(state, "bpe", t.vocab_size, t.train_pairs, cfg.data.split_seed)
    name = f"tokenizer-{key}"
    entry = cache.find(root, name)
    if entry is not None:
        shutil.copytree(entry, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(cache.MARKER))
        log.info("tokenizer: from cache %s (key %s)", entry, key)
        return load_tokenizer(str(folder))
    tokenizer = run_bpe(cfg, load().train, is_main)
    try:
        tmp = cache.new_entry(root, name)
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
        cache.publish(tmp, name)
    except OSError as e:
        log.warning("tokenizer: not cached (%s)", e)
    return tokenizer
