"""Which examples a run trains and evaluates on: the seeded hold-out, subset mixtures, and the counts the data
report gives of them. Everything here takes pairs and groups alike."""

from __future__ import annotations

import random
from collections.abc import Iterable

from rm.data.data_report import DataReport
from rm.data.formats.group import Example, responses_of
from rm.errors import DataError


def _record_key(pair: Example) -> str:
    """Split version 1: pairs made from one record (an Argilla record and its edits) stay on the same side."""
    from rm.data.formats.argilla import EDIT

    return pair.origin.split(EDIT)[0]


def _prompt_key(pair: Example) -> str:
    """Split version 2: every record of one prompt stays on the same side (a file that repeats a prompt,
    as binarized UltraFeedback does six times, no longer trains on the prompts it holds out)."""
    return pair.prompt


def holdout_split(
    pairs: list[Example], fraction: float, seed: int, version: int = 2
) -> tuple[list[Example], list[Example]]:
    """A seeded (train, eval) split by prompt (`version` 2) or by record (1), stratified by subset so small
    subsets keep eval examples. With every prompt distinct the two versions draw the same split."""
    rng = random.Random(seed)
    key = _prompt_key if version == 2 else _record_key
    train, held = [], []
    for subset in sorted({p.subset for p in pairs}):
        groups: dict[str, list[Example]] = {}
        for p in pairs:
            if p.subset == subset:
                groups.setdefault(key(p), []).append(p)
        keys = list(groups)
        rng.shuffle(keys)
        n_eval = max(1, round(len(keys) * fraction)) if len(keys) > 1 else 0
        held += [p for k in keys[:n_eval] for p in groups[k]]
        train += [p for k in keys[n_eval:] for p in groups[k]]
    return train, held


def apply_mixture(pairs: list[Example], weights: dict[str, float], seed: int, report: DataReport) -> list[Example]:
    """Each subset repeated `int(w)` times plus a seeded `frac(w)` share of it again; unlisted subsets keep w=1."""
    have = subset_counts(pairs)
    unknown = sorted(set(weights) - set(have))
    if unknown:
        raise DataError(f"data.mixture.{unknown[0]}: no such subset in the training data (it has: {', '.join(have)})")
    rng = random.Random(seed)
    out = []
    for subset in have:
        group = [p for p in pairs if p.subset == subset]
        weight = weights.get(subset, 1.0)
        whole, frac = int(weight), weight - int(weight)
        mixed = group * whole + rng.sample(group, round(frac * len(group)))
        report.notes.setdefault("mixture", {})[subset] = {"weight": weight, "before": len(group), "after": len(mixed)}
        out += mixed
    return out


def subset_counts(pairs: Iterable[Example]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p.subset] = counts.get(p.subset, 0) + 1
    return dict(sorted(counts.items()))


def shape_counts(items: list[Example]) -> dict[str, int]:
    """Prompts, groups (records after grouping), responses and comparisons of a split, for the data report."""
    sizes = [len(responses_of(p)) for p in items]
    return {
        "prompts": len({p.prompt for p in items}),
        "groups": len(items),
        "responses": sum(sizes),
        "largest_group": max(sizes, default=0),
    }
