"""Evaluation metrics as pure functions of reward and length arrays (numpy, float64).

Kept free of models so each number can be checked against a hand-worked value; the one file written here is
eval.json (`write_eval`), whose undefined metrics must become null on the way out. Conventions shared by every
metric here:
- a pair is *correct* when r_chosen > r_rejected; a tie counts as half right (no preference expressed);
- P(chosen) = sigmoid(r_chosen - r_rejected), the Bradley-Terry probability the model was trained on;
- a response's *length* is whatever the caller measured (rm's report uses characters, so the length
  baseline is the same bar for every model, whatever its tokenizer).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rm.config.atomic import write_text


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def correct(chosen, rejected) -> np.ndarray:
    """Per pair: 1.0 if chosen scores higher, 0.0 if lower, 0.5 on a tie."""
    diff = _f64(chosen) - _f64(rejected)
    return (diff > 0) + 0.5 * (diff == 0)


def p_chosen(chosen, rejected) -> np.ndarray:
    """sigmoid(r_chosen - r_rejected), computed without overflow for large gaps."""
    diff = _f64(chosen) - _f64(rejected)
    return 0.5 * (1.0 + np.tanh(0.5 * diff))


def bootstrap_ci(values, samples: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (Efron & Tibshirani, 1993, ch. 13).

    Resampling n values with replacement only changes how many times each *distinct* value is drawn, so
    the draw is a multinomial over the distinct values: the same distribution as resampling indices, in
    `samples` x (distinct values) memory instead of `samples` x n. Correctness takes three values (0,
    0.5, 1), so this stays small for any eval set. The same seed gives the same interval.
    """
    v = _f64(values)
    if len(v) == 0:
        return float("nan"), float("nan")
    uniq, counts = np.unique(v, return_counts=True)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(v), counts / len(v), size=samples)  # [samples, distinct]
    means = draws @ uniq / len(v)
    tail = (1.0 - level) / 2
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return float(lo), float(hi)


def calibration_bins(chosen, rejected, n_bins: int = 10) -> list[dict]:
    """Reliability table of the model's preference: confidence max(p, 1-p) against how often it is right.

    p = P(chosen). The model predicts "chosen" when p > 0.5, so its confidence lies in [0.5, 1]; that
    range is cut into `n_bins` equal bins (the last one closed). Each bin reports its edges, its pair
    count, the mean confidence and the accuracy (ties half right) of the pairs that fall in it.
    """
    p = p_chosen(chosen, rejected)
    conf = np.maximum(p, 1.0 - p)
    right = correct(chosen, rejected)
    idx = np.minimum(((conf - 0.5) / 0.5 * n_bins).astype(int), n_bins - 1)
    bins = []
    for b in range(n_bins):
        mask = idx == b
        n = int(mask.sum())
        bins.append(
            {
                "lo": 0.5 + 0.5 * b / n_bins,
                "hi": 0.5 + 0.5 * (b + 1) / n_bins,
                "n": n,
                "confidence": float(conf[mask].mean()) if n else float("nan"),
                "accuracy": float(right[mask].mean()) if n else float("nan"),
            }
        )
    return bins


def ece(chosen, rejected, n_bins: int = 10) -> float:
    """Expected calibration error: sum over bins of (share of pairs) x |accuracy - mean confidence|
    (Guo et al., 2017), on the bins of `calibration_bins`. 0 is perfectly calibrated."""
    bins = calibration_bins(chosen, rejected, n_bins)
    total = sum(b["n"] for b in bins)
    if not total:
        return float("nan")
    return float(sum(b["n"] / total * abs(b["accuracy"] - b["confidence"]) for b in bins if b["n"]))


def longer_chosen(len_chosen, len_rejected) -> np.ndarray:
    """Per pair, the "longer wins" baseline's correctness: 1 if chosen is longer, 0 if shorter, 0.5 if equal."""
    return correct(len_chosen, len_rejected)


def length_bias(chosen, rejected, len_chosen, len_rejected) -> dict:
    """How much length explains the preferences, and how much the model leans on it.

    - `longer_chosen_rate`: accuracy of always picking the longer response (the baseline to beat);
    - `length_rule` / `length_rule_accuracy`: the better of "longer wins" and "shorter wins" (the latter
      scores 1 - longer_chosen_rate, ties being half either way). In HH harmless data the chosen answer
      is more often the *shorter* one (a refusal), so a length-only rule is a bar either way round;
    - `accuracy_chosen_longer` / `accuracy_chosen_shorter`: the model's accuracy on pairs where the
      chosen response is the longer / the shorter one. A model that rewards length does well on the
      first and badly on the second;
    - `prefers_longer_rate`: among pairs of unequal length, how often the model scores the longer one
      higher (ties half);
    - `reward_length_spearman`: rank correlation of reward with length over every response scored;
    - `reward_length_pearson`, `reward_length_abs_pearson`: Pearson's r of reward with length over the same
      responses, and its size: the linear part of the lean, the quantity a length-disentangled reward drives
      towards 0 (0 for a reward blind to length, 1 for a reward that is a linear function of it).
    """
    lc, lr = _f64(len_chosen), _f64(len_rejected)
    right = correct(chosen, rejected)
    longer, shorter, unequal = lc > lr, lc < lr, lc != lr
    # The model's verdict on "is the longer one better": its correctness where chosen is longer,
    # the reverse where chosen is shorter.
    picks_longer = np.where(longer, right, 1.0 - right)[unequal]

    def mean(x: np.ndarray) -> float:
        return float(x.mean()) if len(x) else float("nan")

    rate = mean(longer_chosen(lc, lr))
    lengths, rewards = np.concatenate([lc, lr]), np.concatenate([_f64(chosen), _f64(rejected)])
    r = pearson(lengths, rewards)
    return {
        "longer_chosen_rate": rate,
        "length_rule": "shorter wins" if rate < 0.5 else "longer wins",
        "length_rule_accuracy": max(rate, 1.0 - rate) if len(lc) else float("nan"),
        "accuracy_chosen_longer": mean(right[longer]),
        "accuracy_chosen_shorter": mean(right[shorter]),
        "n_chosen_longer": int(longer.sum()),
        "n_chosen_shorter": int(shorter.sum()),
        "prefers_longer_rate": mean(picks_longer),
        "reward_length_spearman": spearman(lengths, rewards),
        "reward_length_pearson": r,
        "reward_length_abs_pearson": abs(r),
    }


def length_diff_bins(chosen, rejected, len_chosen, len_rejected, n_bins: int = 5) -> list[dict]:
    """The model's accuracy against len(chosen) - len(rejected), in quantile bins of that difference.

    Quantile edges give every bin about the same number of pairs (edges that coincide are merged, so
    fewer bins may come back). A bin holds lo <= d < hi; the last one also holds d == hi. Each bin also
    reports the "longer wins" baseline on its pairs.
    """
    d = _f64(len_chosen) - _f64(len_rejected)
    if len(d) == 0:
        return []
    edges = np.unique(np.quantile(d, np.linspace(0, 1, n_bins + 1)))
    if len(edges) == 1:
        edges = np.array([edges[0], edges[0]])
    idx = np.searchsorted(edges[1:-1], d, side="right")
    right = correct(chosen, rejected)
    base = longer_chosen(len_chosen, len_rejected)
    out = []
    for b in range(len(edges) - 1):
        mask = idx == b
        n = int(mask.sum())
        out.append(
            {
                "lo": float(edges[b]),
                "hi": float(edges[b + 1]),
                "n": n,
                "accuracy": float(right[mask].mean()) if n else float("nan"),
                "longer_chosen_rate": float(base[mask].mean()) if n else float("nan"),
            }
        )
    return out


def rankdata(x) -> np.ndarray:
    """Ranks 1..n, tied values sharing the average of the ranks they span ([10, 20, 20] -> [1, 2.5, 2.5])."""
    v = _f64(x)
    order = np.argsort(v, kind="stable")
    sorted_v = v[order]
    # Start of each run of equal values in sorted order, and each element's run.
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]])
    run = np.cumsum(np.r_[True, sorted_v[1:] != sorted_v[:-1]]) - 1
    ends = np.r_[starts[1:], len(v)]  # exclusive
    avg = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(len(v))
    ranks[order] = avg[run]
    return ranks


def pearson(x, y) -> float:
    """Pearson correlation; nan when either side is constant or fewer than two points."""
    a, b = _f64(x), _f64(y)
    if len(a) < 2:
        return float("nan")
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denom) if denom > 0 else float("nan")


def spearman(x, y) -> float:
    """Spearman's rho: Pearson correlation of the average ranks (the tie-corrected form)."""
    if len(x) != len(y):
        raise ValueError(f"spearman: lengths differ ({len(x)} vs {len(y)})")
    return pearson(rankdata(x), rankdata(y))


def pair_summary(
    chosen, rejected, len_chosen, len_rejected, *, samples: int = 1000, seed: int = 0, n_bins: int = 10
) -> dict:
    """Every per-group number of the eval report for one set of pairs (a subset, or all of them)."""
    c, r = _f64(chosen), _f64(rejected)
    n = len(c)
    nan = float("nan")
    right = correct(c, r)
    lo, hi = bootstrap_ci(right, samples=samples, seed=seed)
    return {
        "accuracy": float(right.mean()) if n else nan,
        "n": n,
        "accuracy_ci95": [lo, hi],
        "ece": ece(c, r, n_bins),
        "mean_margin": float((c - r).mean()) if n else nan,
        "mean_chosen_reward": float(c.mean()) if n else nan,
        "mean_rejected_reward": float(r.mean()) if n else nan,
        **length_bias(c, r, len_chosen, len_rejected),
    }


def json_safe(x):
    """Undefined metrics are NaN here, and JSON has no NaN: nested dicts/lists with NaN -> null."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return None if isinstance(x, float) and np.isnan(x) else x


def write_eval(path: Path, result: dict) -> None:
    """Write an eval result to `path` (an eval.json): the one writer of the run's, the export's and `rm eval`'s.

    NaN (an undefined metric, say the accuracy of no pairs) is written as null: JSON has no NaN, and strict
    parsers (jq, JavaScript, Go) refuse a file with one. `allow_nan=False` makes an infinity that slipped
    through fail here rather than in a reader. Written aside and renamed (rm/config/atomic.py): a full disk
    leaves the old file or none, never a 0-byte eval.json that `rm export` then fails to parse.
    """
    write_text(path, json.dumps(json_safe(result), indent=2, allow_nan=False) + "\n")  # whole or not at all
