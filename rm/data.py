"""Preference data: every source becomes a list of `Pair`s that know their subset and their origin.

Sources are local `.jsonl`/`.jsonl.gz` files, directories laid out like the hh-rlhf repository
(`<root>/<subset>/<split>.jsonl.gz`), Hub datasets by name (through `datasets`), and the project's
own generated data. Local files are read line by line here rather than through `datasets` so that a
bad record can be reported with its file and line number.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rm.config import DataConfig
from rm.hh import split_pair

HH_SUBSETS = ("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")


class DataError(ValueError):
    """Bad input, phrased with the file (or dataset), the line (or row) and the field."""


@dataclass
class Pair:
    """One preference: a shared prompt and two continuations of it, the first preferred."""

    prompt: str
    chosen: str
    rejected: str
    subset: str
    margin: float | None = None
    origin: str = ""
    """Where it came from, "file:line", for error messages and reports."""


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def pair_from_record(record: Any, subset: str, origin: str) -> Pair:
    """An HH record (`chosen`/`rejected` full conversations) or a `prompt`/`chosen`/`rejected` record."""
    if not isinstance(record, dict):
        raise DataError(f"{origin}: expected a JSON object, got {type(record).__name__}")
    for name in ("chosen", "rejected"):
        if name not in record:
            raise DataError(f"{origin}: field {name!r} is missing")
        if not isinstance(record[name], str):
            raise DataError(f"{origin}: field {name!r} must be a string, got {type(record[name]).__name__}")
    subset = str(record.get("subset") or subset)
    margin = record.get("margin")
    if margin is not None and not isinstance(margin, (int, float)):
        raise DataError(f"{origin}: field 'margin' must be a number, got {margin!r}")
    if "prompt" in record:
        if not isinstance(record["prompt"], str):
            raise DataError(f"{origin}: field 'prompt' must be a string")
        prompt, chosen, rejected = record["prompt"], record["chosen"], record["rejected"]
        if chosen == rejected:
            raise DataError(f"{origin}: fields 'chosen' and 'rejected' are identical")
    else:
        try:
            prompt, chosen, rejected = split_pair(record["chosen"], record["rejected"])
        except ValueError as e:
            raise DataError(f"{origin}: fields 'chosen'/'rejected': {e}") from None
    for name, text in (("chosen", chosen), ("rejected", rejected)):
        if not text.strip():
            raise DataError(f"{origin}: field {name!r} has an empty response after the prompt")
    return Pair(prompt, chosen, rejected, subset, None if margin is None else float(margin), origin)


def read_jsonl(path: Path, subset: str) -> list[Pair]:
    pairs = []
    try:
        with _open_text(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                origin = f"{path}:{lineno}"
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{origin}: malformed JSON ({e.msg} at column {e.colno})") from None
                pairs.append(pair_from_record(record, subset, origin))
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    return pairs


def _split_files(root: Path, split: str, subsets: list[str]) -> list[tuple[str, Path]]:
    """(subset, file) for every `<root>/<subset>/<split>.jsonl[.gz]`, in a stable order."""
    found = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        if subsets and sub.name not in subsets:
            continue
        for name in (f"{split}.jsonl.gz", f"{split}.jsonl"):
            if (sub / name).is_file():
                found.append((sub.name, sub / name))
                break
    missing = sorted(set(subsets) - {s for s, _ in found})
    if missing:
        raise DataError(f"{root}: no {split}.jsonl[.gz] for subset(s) {', '.join(missing)}")
    return found


def load_local(path: Path, split: str, subsets: list[str]) -> list[Pair]:
    """A file (subset = its folder name, as in the hh-rlhf layout) or an hh-rlhf-style directory."""
    if path.is_file():
        return read_jsonl(path, subset=path.parent.name or "default")
    files = _split_files(path, split, subsets)
    if not files:
        raise DataError(f"{path}: no <subset>/{split}.jsonl[.gz] files found")
    return [pair for subset, file in files for pair in read_jsonl(file, subset)]


def load_hub(name: str, split: str, subsets: list[str]) -> list[Pair]:
    """A Hub dataset; for Anthropic/hh-rlhf each subset is a `data_dir`, as in the repository."""
    import datasets  # imported here: slow to import and unused by local runs

    wanted = subsets or (list(HH_SUBSETS) if name == "Anthropic/hh-rlhf" else [""])
    pairs = []
    for subset in wanted:
        ds = datasets.load_dataset(name, data_dir=subset or None, split=split)
        label = subset or name.rsplit("/", 1)[-1]
        pairs += [pair_from_record(rec, label, f"{name}[{subset or split}] row {i}") for i, rec in enumerate(ds)]
    return pairs


def load_pairs(source: str, split: str, subsets: list[str]) -> list[Pair]:
    path = Path(source).expanduser()
    if path.exists():
        return load_local(path, split, subsets)
    if source.count("/") == 1 and not source.startswith((".", "/", "~")):
        return load_hub(source, split, subsets)
    raise DataError(f"data source not found: {source} (neither a local path nor a Hub dataset name)")


def holdout_split(pairs: list[Pair], fraction: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """A seeded (train, eval) split, stratified by subset so small subsets keep eval examples."""
    rng = random.Random(seed)
    train, held = [], []
    for subset in sorted({p.subset for p in pairs}):
        group = [p for p in pairs if p.subset == subset]
        rng.shuffle(group)
        n_eval = max(1, round(len(group) * fraction)) if len(group) > 1 else 0
        held += group[:n_eval]
        train += group[n_eval:]
    return train, held


def subset_counts(pairs: Iterable[Pair]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p.subset] = counts.get(p.subset, 0) + 1
    return dict(sorted(counts.items()))


def load_splits(cfg: DataConfig, output_dir: Path) -> tuple[list[Pair], list[Pair]]:
    """(train, eval) pairs as the config asks: generated, local or Hub; given split or seeded hold-out."""
    source = cfg.source
    if source == "synthetic":
        from rm import synthetic

        s = cfg.synthetic
        source = str(synthetic.write_dataset(output_dir / "data", s.n_train, s.n_eval, s.seed))
    train = load_pairs(source, cfg.train_split, cfg.subsets)
    if cfg.eval_split:
        held = load_pairs(source, cfg.eval_split, cfg.subsets)
    else:
        train, held = holdout_split(train, cfg.eval_fraction, cfg.split_seed)
    if cfg.max_train_pairs:
        train = random.Random(cfg.split_seed).sample(train, min(cfg.max_train_pairs, len(train)))
    if cfg.max_eval_pairs:
        held = random.Random(cfg.split_seed + 1).sample(held, min(cfg.max_eval_pairs, len(held)))
    return train, held
