"""Preference data: every source becomes a list of `Pair`s and `Group`s (one prompt, K ranked responses) that
know their subset and their origin.

Sources: a local file (`.jsonl[.gz]`, `.json[.gz]`, `.csv[.gz]`, `.parquet`; see `rm/data/sources.py`), a
directory laid out like the hh-rlhf repository (`<root>/<subset>/<split>.jsonl.gz`) or holding
`<split>.<ext>` itself, a Hub dataset by name, or the project's generated data. Each record is read
in the format `data.format` names or, by default, the one its fields look like (`rm/data/formats/parse.py`);
rows of one prompt (and, with `data.group_by_prompt: true`, pairwise records of one prompt) become groups
(`rm/data/grouping.py`). Bad records stop the load, or are skipped and counted (`rm/data/data_report.py`).

`load_data` returns the pairs with a `DataReport` of everything that was skipped, repaired, mixed or
capped; `load_splits` is the same without the report; `eval_pairs` is only its eval pairs (what `rm eval`
scores), chosen by the same steps.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rm.config import DataConfig
from rm.config.loader import relative_note
from rm.config.rundir import RunDir
from rm.data.data_report import DataReport
from rm.data.formats.attributes import attribute_counts
from rm.data.formats.chat import Renderer
from rm.data.formats.group import Example, Group
from rm.data.formats.hh import HH_SUBSETS
from rm.data.formats.pair import Pair, ParseContext
from rm.data.formats.parse import COLUMNS_HINT, apply_columns, detect_format, parse_record, unmapped
from rm.data.formats.strength import soft_targets, strength_counts
from rm.data.grouping import gather_groups
from rm.data.labels import label_counts
from rm.data.sources import SUFFIXES, Records, read_file, read_hub
from rm.data.splits import apply_mixture, holdout_split, prompt_overlap, shape_counts, subset_counts
from rm.data.steps.step_formats import is_step_record
from rm.data.steps.step_groups import step_counts, step_groups
from rm.data.steps.step_load import step_solutions
from rm.errors import DataError, NotPreferenceData, RecordError

__all__ = ["HH_SUBSETS", "DataError", "Example", "Group", "Pair", "eval_pairs", "load_data", "load_pairs"]
__all__ += ["apply_mixture", "holdout_split", "load_splits", "subset_counts"]

RED_TEAM = "red-team-attempts"
SPLIT_NAMES = {"train", "test", "validation", "valid", "eval", "dev"}
"""File stems that name a split: such a file's subset is its folder's name."""
EXTENSIONS = sorted(SUFFIXES, key=lambda s: (s != ".jsonl.gz", s != ".jsonl", s))  # hh-rlhf's own first


def _refuse_red_team(where: str) -> None:
    from rm.data.transcripts import REFUSAL

    raise NotPreferenceData(f"{where}: {REFUSAL}")


def _parse(records: Records, subset: str, cfg: DataConfig, ctx: ParseContext) -> list:
    """Pairs and groups (and rows, grouped later) from raw records, each read in `cfg.format` or, in auto mode,
    the format its fields show."""
    ctx.subset = subset
    records = iter(records)
    first = next(records, None)
    records = itertools.chain([first] if first is not None else [], records)
    if cfg.format == "steps" or (cfg.format == "auto" and first is not None and is_step_record(first[1])):
        return step_groups(step_solutions(records, ctx.report), subset, cfg.step_separator)
    pairs: list = []
    for origin, raw in records:
        try:
            record = apply_columns(raw, cfg.columns)
            fmt = cfg.format if cfg.format != "auto" else detect_format(record)
            if fmt is None and isinstance(record, dict) and "chosen" not in record:
                fields = ", ".join(sorted(map(str, record)))
                message = f"cannot tell the record format from its fields ({fields}); {COLUMNS_HINT}"
                raise RecordError("unknown_format", message)
            if fmt == "red-team":
                _refuse_red_team(origin)
            fmt = fmt or "hh"  # a broken record with a "chosen" field: let the HH parser name what is wrong
            try:
                new = parse_record(fmt, record, origin, ctx)
            except RecordError as e:
                raise unmapped(record, e, fmt) if cfg.format == "auto" and not cfg.columns else e from None
            ctx.report.count("formats", fmt, len(new))
            pairs += new
        except RecordError as e:
            ctx.report.reject(origin, e)
    return pairs


def _split_file(folder: Path, split: str) -> Path | None:
    for ext in EXTENSIONS:
        if (folder / f"{split}{ext}").is_file():
            return folder / f"{split}{ext}"
    return None


def _layout(root: Path, split: str, subsets: list[str]) -> list[tuple[str, Path]]:
    """(subset, file) for every `<root>/<subset>/<split>.<ext>`, in a stable order."""
    found = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        file = _split_file(sub, split)
        if file:
            found.append((sub.name, file))
    missing = sorted(set(subsets) - {s for s, _ in found})
    if found and missing:
        raise DataError(f"{root}: no {split} file for subset(s) {', '.join(missing)}")
    return [(s, f) for s, f in found if (s in subsets if subsets else s != RED_TEAM)]


def file_subset(path: Path) -> str:
    """The subset of a single file's records (unless they name their own): its folder for a split file laid
    out as hh-rlhf's `<subset>/<split>.<ext>` (harmless-base/test.jsonl.gz), else the file's own name
    (prefs/my-pairs.jsonl is `my-pairs`, not `prefs`)."""
    stem = next((path.name[: -len(s)] for s in SUFFIXES if path.name.endswith(s)), path.stem)
    if stem.split("-")[0].lower() in SPLIT_NAMES and path.parent.name:
        return path.parent.name
    return stem or "default"


def _files(path: Path, split: str, subsets: list[str]) -> tuple[list[tuple[str, Path]], bool]:
    """The files to read and whether their subsets are already chosen (folders) or still to filter."""
    if path.is_file():
        return [(file_subset(path), path)], False
    found = _layout(path, split, subsets)
    if found:
        return found, True
    single = _split_file(path, split) or next(iter(sorted(path.glob(f"data/{split}-*.parquet"))), None)
    if single is None:
        raise DataError(f"{path}: no <subset>/{split}.<ext> or {split}.<ext> files found (ext: {', '.join(SUFFIXES)})")
    return [(path.name, single)], False


def load_pairs(
    source: str,
    split: str,
    subsets: list[str],
    cfg: DataConfig | None = None,
    *,
    tokenizer: Any = None,
    report: DataReport | None = None,
) -> list[Example]:
    """The `split` of `source` as pairs and groups; `cfg` gives format, columns, bad-record mode, Argilla and
    grouping options. Every label a record gives is read, whatever the loss and the head will make of it (a
    strength, attributes, a cycle: rm/data/labels.py)."""
    cfg = cfg or DataConfig()
    report = report if report is not None else DataReport(cfg.on_bad_record)
    if cfg.format == "red-team" or RED_TEAM in subsets:
        _refuse_red_team("data.format" if cfg.format == "red-team" else "data.subsets")
    renderer = Renderer(tokenizer, cfg.chat_template, cfg.text_version)
    ctx = ParseContext(report, renderer, argilla=cfg.argilla, score_field=cfg.score_field)
    path = Path(source).expanduser()
    pairs: list = []
    if path.exists():
        files, chosen = _files(path, split, subsets)
        for subset, file in files:
            pairs += _parse(read_file(file, report), subset, cfg, ctx)
    elif source.count("/") == 1 and not source.startswith((".", "/", "~")) and not source.endswith(tuple(SUFFIXES)):
        # Anthropic/hh-rlhf (and copies of it) keep each subset in its own folder: ask for each one.
        chosen = source.endswith("/hh-rlhf")
        for data_dir in (subsets or list(HH_SUBSETS)) if chosen else [""]:
            records = read_hub(source, split, data_dir)
            pairs += _parse(records, data_dir or source.rsplit("/", 1)[-1], cfg, ctx)
    else:
        raise DataError(
            f"data source not found: {source}: neither a local path nor a Hub dataset name{relative_note(source)}"
        )
    stepwise = sum(getattr(p, "steps", None) is not None for p in pairs)
    if 0 < stepwise < len(pairs):
        raise DataError(
            f"{source}: its {split} split mixes {stepwise} stepwise problems with {len(pairs) - stepwise} preference "
            "records; train on one kind at a time (a stepwise file is one whose records have steps and step labels)"
        )
    pairs = pairs if stepwise else gather_groups(pairs, cfg.group_by_prompt, report)
    if subsets and not chosen:
        kept = [p for p in pairs if p.subset in subsets]
        missing = sorted(set(subsets) - {p.subset for p in kept})
        if missing:
            found = ", ".join(subset_counts(pairs)) or "none"
            raise DataError(f"{source}: no {split} pairs of subset(s) {', '.join(missing)} (found: {found})")
        report.count("subset_filter", f"{split}_left_out", len(pairs) - len(kept))
        pairs = kept
    if not pairs:
        raise DataError(f"{source}: no usable {split} pairs (skipped: {report.skipped_counts() or 'none'})")
    return pairs


@dataclass
class LoadedData:
    train: list[Example]
    eval: list[Example]
    report: DataReport


def load_data(cfg: DataConfig, output_dir: Path, tokenizer: Any = None) -> LoadedData:
    """(train, eval) pairs as the config asks, and the report of what loading skipped, repaired and changed, and
    of the labels the items carry (`labels`: the attribute names found, how many items have a strength...)."""
    report = DataReport(cfg.on_bad_record)
    source = cfg.source
    if source == "synthetic":
        from rm.data import synthetic

        s = cfg.synthetic
        source = str(synthetic.write_dataset(RunDir(output_dir).data, s.n_train, s.n_eval, s.seed))
    options = {"tokenizer": tokenizer, "report": report}
    train = load_pairs(source, cfg.train_split, cfg.subsets, cfg, **options)
    if cfg.eval_split and Path(source).expanduser().is_file():
        raise DataError(
            f"{source}: a single file has no separate {cfg.eval_split!r} split; set data.eval_split='' "
            "to hold out data.eval_fraction of it"
        )
    train, held = _held_out(cfg, source, train, tokenizer, report, options)
    if cfg.mixture:
        train = apply_mixture(train, cfg.mixture, cfg.split_seed, report)
    if cfg.max_train_pairs:
        report.count("capped", "train_left_out", max(0, len(train) - cfg.max_train_pairs))
        train = random.Random(cfg.split_seed).sample(train, min(cfg.max_train_pairs, len(train)))
    held = _cap_eval(cfg, held, report)
    report.notes["pairs"] = {"train": subset_counts(train), "eval": subset_counts(held)}
    report.notes["groups"] = {"train": shape_counts(train), "eval": shape_counts(held)}
    if not cfg.eval_split:
        report.notes["groups"]["split_version"] = cfg.split_version
    # Counted, not moved: an explicit eval split is the user's to choose (a benchmark's test set stays whole).
    report.notes["overlap"] = prompt_overlap(train, held)
    every = train + held  # how many items carry each label: the registered ones, a strength, attributes
    counts = label_counts(every) | {"strength": strength_counts(every), "attributes": attribute_counts(every)}
    counts["steps"] = step_counts(every)
    if found := {name: c for name, c in counts.items() if c["items"]}:
        report.notes["labels"] = found
    return LoadedData(train, held, report)


def eval_pairs(
    cfg: DataConfig, tokenizer: Any = None, report: DataReport | None = None, loss: Any = None
) -> list[Example]:
    """The pairs a run with `cfg` evaluates on, chosen by the same steps as `load_data` (so `rm eval` can
    score a run's own held-out set): `cfg.eval_split` of `cfg.source` (the whole of a single file), or
    the seeded `eval_fraction` held out of its `train_split`; then at most `max_eval_pairs` of them.

    The training split is read only when the eval pairs are held out of it. `cfg.source` must be a
    source `load_pairs` reads (`synthetic` is written into a run's directory first, by `load_data`).
    `loss` with strength=soft: each pair's strength becomes its soft target, as training's splits get theirs
    (`soft_targets`); encoding takes the attribute scores of the model's names (`encode_kept`).
    """
    report = report if report is not None else DataReport(cfg.on_bad_record)
    train: list[Example] = []
    options = {"tokenizer": tokenizer, "report": report}
    if not cfg.eval_split:
        train = load_pairs(cfg.source, cfg.train_split, cfg.subsets, cfg, **options)
    _, held = _held_out(cfg, cfg.source, train, tokenizer, report, options)
    soft = loss is not None and loss.strength == "soft"
    if soft and any(getattr(p, "strength", None) is not None for p in held):
        held, report.notes["strength"] = soft_targets(held, loss.strength_max, report)
    return _cap_eval(cfg, held, report)


def _held_out(
    cfg: DataConfig, source: str, train: list[Example], tokenizer: Any, report: DataReport, options: dict | None = None
) -> tuple[list[Example], list[Example]]:
    """(train, eval): the `eval_split` of `source` beside `train`, or `train` less its seeded held-out part;
    `options` are `load_pairs`' keyword arguments (tokenizer and report: these)."""
    if cfg.eval_split:
        options = (options or {}) | {"tokenizer": tokenizer, "report": report}
        held = load_pairs(source, cfg.eval_split, cfg.subsets, cfg, **options)
        return train, held
    return holdout_split(train, cfg.eval_fraction, cfg.split_seed, cfg.split_version)


def _cap_eval(cfg: DataConfig, held: list[Example], report: DataReport) -> list[Example]:
    """At most `max_eval_pairs`, a sample seeded apart from the training cap's (split_seed + 1); the rest counted.

    A cap at or above the count still reorders the pairs (a sample of all of them), as a run's eval set always has."""
    if cfg.max_eval_pairs:
        report.count("capped", "eval_left_out", max(0, len(held) - cfg.max_eval_pairs))
        held = random.Random(cfg.split_seed + 1).sample(held, min(cfg.max_eval_pairs, len(held)))
    return held


def load_splits(cfg: DataConfig, output_dir: Path, tokenizer: Any = None) -> tuple[list[Example], list[Example]]:
    """(train, eval) pairs as the config asks: generated, local or Hub; given split or seeded hold-out."""
    loaded = load_data(cfg, output_dir, tokenizer)
    return loaded.train, loaded.eval
