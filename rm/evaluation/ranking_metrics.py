"""What a reward model gets right about groups: one prompt, K responses with ranks (0 best, equal ranks tie).

- `accuracy`: over every strictly ordered pair of every group (a reward tie counts one half, as for pairs);
  tied pairs are not in it, `tie_mean_abs_diff` says how close their rewards came instead, beside
  `strict_mean_abs_diff` for the strictly ordered pairs.
- `top1_accuracy`: the response with the highest reward is one of the best-ranked (split evenly when
  several responses share the highest reward).
- `best_of_k_accuracy`: every best-ranked response beats every other response, as RewardBench 2 counts a
  prompt right only when its correct answer beats all three incorrect ones.
- `kendall_tau`: the mean over groups of Kendall's tau-b between rewards and ranks (Kendall, 1945: tau-b
  corrects for ties on either side); a group with no order on one side has none and is left out.
- `accuracy_ci95`: a percentile bootstrap over prompts, not pairs: the pairs of one prompt share its text
  and are not independent, so resampling pairs would give intervals too narrow. For groups of two it is
  the pairwise bootstrap of rm/evaluation/metrics.py, draw for draw.
"""

from __future__ import annotations

import numpy as np

from rm.evaluation.metrics import bootstrap_ci


def group_scores(rewards: np.ndarray, rank: np.ndarray) -> dict[str, float]:
    """One group's numbers: right (sum over its strict pairs), strict pairs, top-1, best-of-K, tau-b, and the
    summed |reward difference| of its tied and strict pairs."""
    r, q = np.asarray(rewards, dtype=np.float64), np.asarray(rank)
    a, b = np.triu_indices(len(r), 1)  # every pair of responses once
    strict = q[a] != q[b]
    better_first = np.where(q[a] < q[b], 1.0, -1.0)  # +1 where a is ranked above b
    diff = (r[a] - r[b]) * better_first
    right = np.where(diff > 0, 1.0, np.where(diff == 0, 0.5, 0.0))[strict]
    top = np.flatnonzero(r == r.max())
    best = q == q.min()
    n0 = len(a)
    sign_r, sign_q = np.sign(r[a] - r[b]), np.sign(q[b] - q[a])  # rank: lower is better
    n1, n2 = int((sign_r == 0).sum()), int((sign_q == 0).sum())
    denominator = np.sqrt(float(n0 - n1) * float(n0 - n2))
    tau = float((sign_r * sign_q).sum() / denominator) if denominator else float("nan")
    gaps = np.abs(r[a] - r[b])
    return {
        "right": float(right.sum()),
        "strict": int(strict.sum()),
        "top1": float(best[top].mean()),
        "best_of_k": float(r[best].min() > r[~best].max()) if (~best).any() else float("nan"),
        "tau": tau,
        "tie_gap": float(gaps[~strict].sum()),
        "ties": int((~strict).sum()),
        "strict_gap": float(gaps[strict].sum()),
    }


def ratio_bootstrap_ci(
    sums: np.ndarray, counts: np.ndarray, samples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap of sum(sums) / sum(counts) over resampled groups. Groups are drawn by their distinct
    (sum, count) values with multinomial counts, as `bootstrap_ci` draws distinct values: the same draws, so
    groups of one pair each give `bootstrap_ci`'s interval of their correctness exactly."""
    keep = counts > 0
    sums, counts = np.asarray(sums, dtype=np.float64)[keep], np.asarray(counts, dtype=np.float64)[keep]
    if len(sums) == 0:
        return float("nan"), float("nan")
    if np.all(counts == 1):
        return bootstrap_ci(sums, samples=samples, level=level, seed=seed)
    uniq, inverse = np.unique(np.stack([sums, counts], axis=1), axis=0, return_inverse=True)
    freq = np.bincount(inverse.ravel(), minlength=len(uniq))
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(sums), freq / len(sums), size=samples)  # [samples, distinct]
    ratios = (draws @ uniq[:, 0]) / (draws @ uniq[:, 1])
    tail = (1.0 - level) / 2
    lo, hi = np.quantile(ratios, [tail, 1.0 - tail])
    return float(lo), float(hi)


def group_summary(
    rewards: list[np.ndarray], ranks: list[np.ndarray], *, samples: int = 1000, seed: int = 0
) -> dict[str, float | int | list[float]]:
    """The group metrics of one set of groups (a subset, or all of them), keyed as eval.json holds them."""
    nan = float("nan")
    per = [group_scores(r, q) for r, q in zip(rewards, ranks, strict=True)]
    sums = np.array([g["right"] for g in per])
    counts = np.array([g["strict"] for g in per])
    taus = np.array([g["tau"] for g in per])
    best = np.array([g["best_of_k"] for g in per])
    ties = sum(g["ties"] for g in per)
    lo, hi = ratio_bootstrap_ci(sums, counts, samples=samples, seed=seed)
    return {
        "accuracy": float(sums.sum() / counts.sum()) if counts.sum() else nan,
        "n": int(counts.sum()),
        "prompts": len(per),
        "accuracy_ci95": [lo, hi],
        "top1_accuracy": float(np.mean([g["top1"] for g in per])) if per else nan,
        "best_of_k_accuracy": float(np.nanmean(best)) if np.isfinite(best).any() else nan,
        "kendall_tau": float(np.nanmean(taus)) if np.isfinite(taus).any() else nan,
        "tied_pairs": ties,
        "tie_mean_abs_diff": sum(g["tie_gap"] for g in per) / ties if ties else nan,
        "strict_mean_abs_diff": sum(g["strict_gap"] for g in per) / counts.sum() if counts.sum() else nan,
    }
