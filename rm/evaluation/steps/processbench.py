"""ProcessBench's metric, written from the paper's definition (Zheng et al. 2024, "ProcessBench: Identifying Process
Errors in Mathematical Reasoning", arXiv 2412.06559).

Each item is one step-by-step solution whose label is the index of its earliest erroneous step, or -1 when every
step is correct. A PRM's prediction is the index of the first step whose probability of being correct is below a
threshold (0.5 by default, the caller's to choose), or -1 when no step is. Per split (the benchmark's are gsm8k,
math, olympiadbench and omnimath):

- `erroneous_acc`: over the items with an error (label != -1), the share whose prediction is exactly the label.
  Flagging a later step, or an earlier correct one, is as wrong as flagging none: the benchmark asks for the
  earliest error, not for "something is wrong".
- `correct_acc`: over the items without an error (label == -1), the share predicted -1.
- `f1`: the harmonic mean of the two, 2ab / (a + b), and 0 when both are 0. The harmonic mean is the paper's
  choice because a model that calls everything correct gets correct_acc 1 and erroneous_acc 0, and F1 0.

A split with no erroneous item (or no correct one) has no accuracy on that side: it is None, not 0 or 1, since
there is nothing it was measured on, and the split's F1 is None too. `average_f1`, the benchmark's one number, is
the unweighted mean of the splits' F1 (each split counts once, whatever its size: gsm8k's 400 items weigh as
much as math's 1,000). It is None when any split has no F1, rather than a mean over the others that would not
be comparable to a full score; the per-split numbers are still there.

`error_detection_prf` is a different number, kept apart and named apart: the precision and recall of flagging a
solution as erroneous at all (prediction != -1) against it having an error (label != -1), as some forks report it.
It credits a flag at the wrong step, so it is NOT the benchmark's F1 and is not comparable with the paper's tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rm.evaluation.steps.step_metrics import CORRECT_AT


@dataclass(frozen=True)
class ProcessBenchItem:
    """One solution of the benchmark with the model's step probabilities."""

    split: str
    """The subset it belongs to (gsm8k, math, olympiadbench, omnimath, or any other name)."""
    label: int
    """Index of its earliest erroneous step, -1 when all steps are correct."""
    step_probs: tuple[float, ...]
    """The model's probability that each step is correct, in step order (any sequence; kept as a tuple)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_probs", tuple(float(p) for p in self.step_probs))
        if not -1 <= self.label < len(self.step_probs):
            # A label past the last step could never be matched: a data error, not a miss of the model.
            raise ValueError(
                f"split {self.split!r}: label {self.label} is not -1 or a step index of {len(self.step_probs)} steps"
            )


def first_error(step_probs: Sequence[float], threshold: float = CORRECT_AT) -> int:
    """The index of the first step whose probability of being correct is below `threshold`, -1 if none is."""
    for i, p in enumerate(step_probs):
        if not math.isfinite(p):  # NaN < threshold is False: a NaN step would pass as correct
            raise ValueError(f"step {i}: probability {p} is not finite")
        if p < threshold:
            return i
    return -1


def harmonic_mean(a: float | None, b: float | None) -> float | None:
    """2ab / (a + b); 0 when both are 0; None when either is None (undefined)."""
    if a is None or b is None:
        return None
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def processbench_scores(
    items: Iterable[ProcessBenchItem], threshold: float = CORRECT_AT
) -> dict[str, dict[str, dict[str, float | int | None]] | float | None]:
    """{"splits": {split: {erroneous_acc, correct_acc, f1, n_erroneous, n_correct}}, "average_f1": mean of the
    splits' F1}, splits in the order they first appear; see the module's docstring for the undefined cases."""
    counts: dict[str, list[int]] = {}  # split -> [erroneous, erroneous right, correct, correct right]
    for item in items:
        c = counts.setdefault(item.split, [0, 0, 0, 0])
        right = first_error(item.step_probs, threshold) == item.label
        side = 0 if item.label != -1 else 2
        c[side] += 1
        c[side + 1] += right
    splits: dict[str, dict[str, float | int | None]] = {}
    for split, (n_err, err_right, n_cor, cor_right) in counts.items():
        erroneous_acc = err_right / n_err if n_err else None
        correct_acc = cor_right / n_cor if n_cor else None
        splits[split] = {
            "erroneous_acc": erroneous_acc,
            "correct_acc": correct_acc,
            "f1": harmonic_mean(erroneous_acc, correct_acc),
            "n_erroneous": n_err,
            "n_correct": n_cor,
        }
    f1s = [s["f1"] for s in splits.values()]
    average = sum(f1s) / len(f1s) if f1s and None not in f1s else None
    return {"splits": splits, "average_f1": average}


def error_detection_prf(
    items: Iterable[ProcessBenchItem], threshold: float = CORRECT_AT
) -> dict[str, float | int | None]:
    """NOT ProcessBench's F1: precision, recall and F1 of flagging a solution as erroneous (some step below
    `threshold`) against its having an error, whichever step is flagged, over all the items given (pass one
    split's items for one split's numbers). Precision is None when nothing is flagged, recall when no item has an
    error, F1 when either is None (0 when both are 0). Keys are prefixed `detection_` so that they cannot be
    merged over `processbench_scores`' `f1` by mistake."""
    tp = fp = fn = 0
    for item in items:
        flagged, erroneous = first_error(item.step_probs, threshold) != -1, item.label != -1
        tp += flagged and erroneous
        fp += flagged and not erroneous
        fn += erroneous and not flagged
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    return {
        "detection_precision": precision,
        "detection_recall": recall,
        "detection_f1": harmonic_mean(precision, recall),
        "detection_tp": tp,
        "detection_fp": fp,
        "detection_fn": fn,
    }
