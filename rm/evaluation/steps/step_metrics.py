"""How well a PRM's step probabilities match the step labels, every step of every solution pooled.

- `step_accuracy`: the share of steps whose prediction matches the label. A step is predicted correct iff its
  probability is at least `CORRECT_AT` (0.5). A label may be soft, a value in [0, 1] (Math-Shepherd's Monte Carlo
  estimates: the share of completions from the step that reach the right answer); it counts as the correct class
  iff it is at least 0.5, so a hard label (True / 1.0, False / 0.0) is its own class and 0.5 itself is correct.
- `step_auc`: ROC AUC with "correct" as the positive class, in the Mann-Whitney form: the chance that a correct
  step drawn at random gets a higher probability than a wrong one, a tie counting one half (average ranks). It
  is undefined (None) when every step is of one class. Unlike accuracy it does not depend on the 0.5 cut, so a
  model whose probabilities are well ordered but off-centre shows it here.

Both take one list of step probabilities per solution and one list of labels per solution, the two of the same
lengths; a solution whose lengths differ raises a ValueError that names its index, as does a non-finite
probability or a label outside [0, 1] (a NaN compares false with everything and would otherwise count silently).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rm.data.steps.step_records import CORRECT_AT
from rm.evaluation.attribute_metrics import auc as attribute_auc


def flat_steps(
    step_probs: Sequence[Sequence[float]], step_labels: Sequence[Sequence[float | bool]]
) -> tuple[np.ndarray, np.ndarray]:
    """Every step's probability ([steps], float) and class ([steps], True where correct), solutions in order;
    raises ValueError naming the first solution whose lengths or values are wrong."""
    if len(step_probs) != len(step_labels):
        raise ValueError(f"{len(step_probs)} solutions of step probabilities but {len(step_labels)} of step labels")
    probs, labels = [], []
    for i, (p, y) in enumerate(zip(step_probs, step_labels, strict=True)):
        p, y = np.asarray(p, dtype=np.float64).reshape(-1), np.asarray(y, dtype=np.float64).reshape(-1)
        if len(p) != len(y):
            raise ValueError(f"solution {i}: {len(p)} step probabilities but {len(y)} step labels")
        if not np.isfinite(p).all():
            raise ValueError(f"solution {i}: a step probability is not finite: {p.tolist()}")
        if not ((y >= 0.0) & (y <= 1.0)).all():  # also false for NaN
            raise ValueError(f"solution {i}: a step label is outside [0, 1]: {y.tolist()}")
        probs.append(p)
        labels.append(y)
    if not probs:
        return np.zeros(0), np.zeros(0, dtype=bool)
    return np.concatenate(probs), np.concatenate(labels) >= CORRECT_AT


def accuracy(probs: np.ndarray, correct: np.ndarray) -> float | None:
    """The share of flat steps predicted as their class (probability >= 0.5 against correct); None without steps."""
    return float(np.mean((probs >= CORRECT_AT) == correct)) if len(probs) else None


def auc(probs: np.ndarray, correct: np.ndarray) -> float | None:
    """Mann-Whitney's AUC of flat step probabilities for the correct steps (attribute_metrics.auc, the project's
    one), None rather than NaN when the steps are of one class."""
    value = attribute_auc(probs, correct.astype(np.float64))
    return None if math.isnan(value) else value


def step_accuracy(step_probs: Sequence[Sequence[float]], step_labels: Sequence[Sequence[float | bool]]) -> float | None:
    """The share of all steps predicted as their label says (probability >= 0.5 against label >= 0.5); None when
    there is no step."""
    return accuracy(*flat_steps(step_probs, step_labels))


def step_auc(step_probs: Sequence[Sequence[float]], step_labels: Sequence[Sequence[float | bool]]) -> float | None:
    """ROC AUC of the step probabilities for the correct steps against the wrong ones, all solutions pooled;
    None when every step is of one class (or there is none)."""
    return auc(*flat_steps(step_probs, step_labels))


def step_scores(
    step_probs: Sequence[Sequence[float]], step_labels: Sequence[Sequence[float | bool]]
) -> dict[str, float | int | None]:
    """`step_accuracy` and `step_auc` with the counts behind them: steps, and how many of them are correct."""
    probs, correct = flat_steps(step_probs, step_labels)
    return {
        "step_accuracy": accuracy(probs, correct),
        "step_auc": auc(probs, correct),
        "n_steps": len(probs),
        "n_correct_steps": int(correct.sum()),
    }
