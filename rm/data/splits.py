"""Which examples a run trains and evaluates on: the seeded hold-out, subset mixtures, and the counts the data
report gives of them. Everything here takes pairs and groups alike.

The hold-out (`data.split_version`) is drawn per subset, in sorted subset order from one seeded generator: each
subset's keys are shuffled and its first `max(1, round(n * eval_fraction))` go to eval (none for a subset of one
key), so a small subset keeps eval examples. The key is the record (version 1), or the prompt text (2 and 3), the
exact text that `data.group_by_prompt` gathers groups by (rm/data/grouping.py).

Version 2 draws each subset on its own, so one prompt in two subsets (two folders of an hh-style directory, or
records naming their own `subset`) lands on each side independently: with the same 200 prompts in two folders
(eval_fraction 0.1, seed 0), 28 of the 34 held-out prompts (82%) were trained on in the other folder
(tests/data/test_holdout_across_subsets.py). Version 3 puts a prompt on one side for every subset and file of the run:

- Stratification: each subset is still shuffled and sized as in version 2 (the generator is used exactly as
  version 2 uses it). A prompt's side is drawn by the first subset (in sorted order) that holds it; every later
  subset honours it. A subset's prompts already held out count towards its eval share, and only its prompts not
  yet drawn fill the rest, in its shuffled order: so each subset's share is kept as close as the draw allows
  (more where the prompts it shares were already held out, fewer where they were all kept for training).
- Where no prompt spans two subsets nothing is drawn earlier, and version 3 draws exactly version 2's split.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from rm.config.checks import SPLIT_VERSIONS
from rm.data.data_report import DataReport
from rm.data.formats.group import Example, responses_of
from rm.errors import DataError


def _record_key(pair: Example) -> str:
    """Split version 1: pairs made from one record (an Argilla record and its edits) stay on the same side."""
    from rm.data.formats.argilla import EDIT

    return pair.origin.split(EDIT)[0]


def _prompt_key(pair: Example) -> str:
    """Split versions 2 and 3: every record of one prompt stays on the same side (a file that repeats a prompt,
    as binarized UltraFeedback does six times, no longer trains on the prompts it holds out)."""
    return pair.prompt


def holdout_split(
    pairs: list[Example], fraction: float, seed: int, version: int = 3
) -> tuple[list[Example], list[Example]]:
    """A seeded (train, eval) split by prompt across subsets (`version` 3), by prompt within each subset (2) or by
    record (1), stratified by subset so small subsets keep eval examples (the module docstring says how). With
    every prompt distinct the three versions draw the same split; with no prompt in two subsets, 2 and 3 do."""
    if version not in SPLIT_VERSIONS:
        raise DataError(f"data.split_version: {version} is not one of {', '.join(map(str, SPLIT_VERSIONS))}")
    rng = random.Random(seed)
    key = _record_key if version == 1 else _prompt_key
    drawn: dict[str, bool] = {}  # version 3: each prompt's side (True: eval), drawn by the first subset holding it
    train, held = [], []
    for subset in sorted({p.subset for p in pairs}):
        groups: dict[str, list[Example]] = {}
        for p in pairs:
            if p.subset == subset:
                groups.setdefault(key(p), []).append(p)
        keys = list(groups)
        rng.shuffle(keys)
        n_eval = max(1, round(len(keys) * fraction)) if len(keys) > 1 else 0
        out = _honoured(keys, n_eval, drawn) if version == 3 else set(keys[:n_eval])
        held += [p for k in keys if k in out for p in groups[k]]
        train += [p for k in keys if k not in out for p in groups[k]]
    return train, held


def _honoured(keys: list[str], n_eval: int, drawn: dict[str, bool]) -> set[str]:
    """The held-out keys of one subset (`keys` shuffled) under version 3: those an earlier subset held out, and
    then its undrawn keys in order until it has `n_eval`; the undrawn are recorded in `drawn`. With nothing drawn
    before, that is `keys[:n_eval]`, version 2's choice."""
    need = n_eval - sum(drawn.get(k, False) for k in keys)
    for k in keys:
        if k not in drawn:
            drawn[k] = need > 0
            need -= drawn[k]
    return {k for k in keys if drawn[k]}


def prompt_overlap(train: list[Example], held: list[Example]) -> dict[str, int]:
    """How many eval prompts (by the hold-out's prompt key) are training prompts too, and how many eval examples
    have them: the data report's `overlap`. A score on a prompt the model trained on flatters it."""
    trained = {_prompt_key(p) for p in train}
    seen = [p for p in held if _prompt_key(p) in trained]
    return {
        "eval_prompts": len({_prompt_key(p) for p in held}),
        "eval_prompts_in_train": len({_prompt_key(p) for p in seen}),
        "eval_groups_in_train": len(seen),
    }


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
