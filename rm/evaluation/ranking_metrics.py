"""What a reward model gets right about groups: one prompt, K responses with ranks (0 best, equal ranks tie).

- `accuracy`: over every strictly ordered pair of every group (a reward tie counts one half, as for pairs);
  tied pairs are not in it, `tie_mean_abs_diff` says how close their rewards came instead, beside
  `strict_mean_abs_diff` for the strictly ordered pairs.
- `top1_accuracy`: the response with the highest reward is one of the best-ranked (split evenly when
  several responses share the highest reward); a group whose responses all tie (a tied pair) has nothing
  to pick and is left out, as it is of `best_of_k_accuracy`.
- `best_of_k_accuracy`: every best-ranked response beats every other response, as RewardBench 2 counts a
  prompt right only when its correct answer beats all three incorrect ones.
- `kendall_tau`: the mean over groups of Kendall's tau-b between rewards and ranks (Kendall, 1945: tau-b
  corrects for ties on either side); a group with no order on one side has none and is left out.
- `accuracy_ci95`: a percentile bootstrap over prompts, not pairs: the pairs of one prompt share its text
  and are not independent, so resampling pairs would give intervals too narrow. For groups of two it is
  the pairwise bootstrap of rm/evaluation/metrics.py, draw for draw. `top1_ci95` and `best_of_k_ci95` resample
  prompts the same way.
- `longest_best_of_k`, `shortest_best_of_k` (with their `_ci95`): best-of-K of a "reward" that is the response's
  length, or minus it: how often always picking the longest (shortest) response gets the group right, by the same
  rule and over the same groups as the model's best-of-K, so a ranking that length alone decides shows as 1.0
  (0.0 for the other pick), the bar a model's best-of-K must clear. Only where the caller gave lengths.
- `top1_chance`, `best_of_k_chance`: what random rewards (independent, continuous) score on the same groups,
  the bar a model must clear: a group of K responses with B best-ranked ones gives B / K for top-1 and
  1 / C(K, B) for best-of-K (1/K with one best answer, 0.25 for RewardBench 2's best-of-4).
"""

from __future__ import annotations

import math

import numpy as np

from rm.evaluation.metrics import bootstrap_ci


def rank_comparisons(rank: np.ndarray) -> np.ndarray:
    """Every pair of responses as (a, b, tie) rows in the order of rm/collate/padded.py's `comparisons` for a group
    without explicit pairs: each strictly ordered pair better first, then each tied pair (a before b)."""
    q = np.asarray(rank)
    better, worse = np.nonzero(q[:, None] < q[None, :])  # row-major: by the better response, then the worse
    a, b = np.triu_indices(len(q), 1)
    tied = q[a] == q[b]
    strict = np.stack([better, worse, np.zeros_like(better)], 1)
    return np.concatenate([strict, np.stack([a[tied], b[tied], np.ones_like(a[tied])], 1)]).astype(np.int64)


def group_scores(rewards: np.ndarray, rank: np.ndarray, pairs: np.ndarray | None = None) -> dict[str, float]:
    """One group's numbers: right (sum over its strict pairs), strict pairs, top-1, best-of-K, tau-b, and the
    summed |reward difference| of its tied and strict pairs (`score_groups` of this group alone)."""
    scores = score_groups([rewards], [rank], [pairs])
    return {k: int(v[0]) if k in ("strict", "ties") else float(v[0]) for k, v in scores.items()}


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


def score_groups(
    rewards: list[np.ndarray], ranks: list[np.ndarray], pairs: list[np.ndarray | None] | None = None
) -> dict[str, np.ndarray]:
    """Every group's numbers as columns ([groups] each), so that a subset is a mask over them and every group is
    scored once however many subsets it is summarised in.

    `pairs[g]` ([comparisons, 3]: a, b, tie; a better than b unless tied) are the comparisons the data gives;
    None: every pair ordered by rank. Groups merged from pairwise records give theirs explicitly (their ranks are
    only the levels of that order), so accuracy and the gaps follow the pairs, top-1, best-of-K and tau the ranks.
    """
    size = np.array([len(r) for r in rewards], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    given = pairs if pairs is not None else [None] * len(rewards)
    comparisons = [rank_comparisons(q) if p is None else np.asarray(p, dtype=np.int64).reshape(-1, 3)
                   for q, p in zip(ranks, given, strict=True)]  # fmt: skip
    flat = np.concatenate(comparisons) if comparisons else np.zeros((0, 3), dtype=np.int64)
    pair_group = np.repeat(np.arange(len(rewards)), [len(c) for c in comparisons])
    return score_flat(
        np.concatenate(rewards).astype(np.float64) if rewards else np.zeros(0),
        np.repeat(np.arange(len(rewards)), size),
        np.concatenate(ranks) if ranks else np.zeros(0, dtype=np.int64),
        pair_group,
        start[pair_group] + flat[:, 0],
        start[pair_group] + flat[:, 1],
        flat[:, 2].astype(bool),
        len(rewards),
    )


def score_flat(
    reward: np.ndarray,
    group: np.ndarray,
    rank: np.ndarray,
    pair_group: np.ndarray,
    better: np.ndarray,
    worse: np.ndarray,
    tie: np.ndarray,
    groups: int | None = None,
) -> dict[str, np.ndarray]:
    """`score_groups` on flat arrays, as eval gathers them: `reward`, `group`, `rank` ([responses], grouped: each
    group's responses together, groups in order 0..G-1) and the comparisons' group and the positions in `reward`
    of their better and worse (or tied) responses ([comparisons]). Numpy over all groups at once: 8,000 pairs took
    3.6 s one group at a time. `groups`: how many there are (default: up to the last in `group`); a group with no
    response (every reward of it non-finite, left out) gets no top-1, best-of-K or tau."""
    groups = groups if groups is not None else int(group.max()) + 1 if len(group) else 0
    r, q = reward.astype(np.float64), rank
    size = np.bincount(group, minlength=groups)
    start = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    filled = np.flatnonzero(size)

    def extreme(ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        """Per group, `ufunc` over its responses' `values`; NaN for an empty group (reduceat cannot skip one)."""
        out = np.full(groups, np.nan)
        out[filled] = ufunc.reduceat(values, start[filled]) if len(filled) else []
        return out

    def per_group(values: np.ndarray, where: np.ndarray) -> np.ndarray:
        return np.bincount(pair_group[where], values[where], minlength=groups)

    diff = r[better] - r[worse]
    right = np.where(diff > 0, 1.0, np.where(diff == 0, 0.5, 0.0))
    gaps, strict = np.abs(diff), ~tie
    out = {
        "right": per_group(right, strict),
        "strict": np.bincount(pair_group[strict], minlength=groups).astype(np.float64),
        "tie_gap": per_group(gaps, tie),
        "ties": np.bincount(pair_group[tie], minlength=groups).astype(np.float64),
        "strict_gap": per_group(gaps, strict),
    }
    nan = np.full(groups, np.nan)
    if not groups:
        return out | {"top1": nan, "best_of_k": nan, "tau": nan, "top1_chance": nan, "best_of_k_chance": nan}
    top = r == extreme(np.maximum, r)[group]  # [responses]: has its group's highest reward
    best = q == extreme(np.minimum, q)[group]  # ranked best in its group
    others = size - np.bincount(group, best, minlength=groups)
    with np.errstate(invalid="ignore"):  # 0 / 0 for an empty group, which `others` leaves out below
        top_best = np.bincount(group, top & best, minlength=groups) / np.bincount(group, top, minlength=groups)
    lowest_best = extreme(np.minimum, np.where(best, r, np.inf))
    highest_other = extreme(np.maximum, np.where(best, -np.inf, r))
    # Kendall's tau-b over every pair of responses of a group, the groups of each size K at once ([groups_K, pairs]).
    concordant, tied_r, tied_q, n0 = np.zeros(groups), np.zeros(groups), np.zeros(groups), np.zeros(groups)
    for k in np.unique(size):
        of_k = np.flatnonzero(size == k)
        a, b = np.triu_indices(int(k), 1)
        i, j = start[of_k, None] + a, start[of_k, None] + b
        sign_r, sign_q = np.sign(r[i] - r[j]), np.sign(q[j] - q[i])  # rank: lower is better
        concordant[of_k] = (sign_r * sign_q).sum(1)
        tied_r[of_k], tied_q[of_k], n0[of_k] = (sign_r == 0).sum(1), (sign_q == 0).sum(1), len(a)
    denominator = np.sqrt((n0 - tied_r) * (n0 - tied_q))
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = np.where(denominator > 0, concordant / denominator, np.nan)
    n_best = size - others
    ways = np.array([math.comb(int(k), int(b)) for k, b in zip(size, n_best, strict=True)], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # an empty group: 0 / 0, left out by `others` below
        top1_chance = n_best / size
    return out | {
        "top1": np.where(others > 0, top_best, np.nan),
        "best_of_k": np.where(others > 0, (lowest_best > highest_other).astype(np.float64), np.nan),
        "tau": tau,
        "top1_chance": np.where(others > 0, top1_chance, np.nan),
        "best_of_k_chance": np.where(others > 0, 1.0 / np.maximum(ways, 1.0), np.nan),
    }


def length_columns(lengths: list[np.ndarray], ranks: list[np.ndarray]) -> dict[str, np.ndarray]:
    """`length_picks` of groups given as lists, one array of lengths and one of ranks per group."""
    size = [len(x) for x in lengths]
    flat = np.concatenate(lengths) if lengths else np.zeros(0)
    rank = np.concatenate(ranks) if ranks else np.zeros(0, dtype=np.int64)
    return length_picks(flat, np.repeat(np.arange(len(lengths)), size), rank, len(lengths))


def length_picks(lengths: np.ndarray, group: np.ndarray, rank: np.ndarray, groups: int) -> dict[str, np.ndarray]:
    """Per group ([groups] each), the best-of-K of always picking the longest response and of always picking the
    shortest: `score_flat`'s best-of-K with each response's length (minus it) as its reward, so a length tie
    between a best-ranked response and another is no pick, as a reward tie is no win. `summarize_scores` adds them
    beside the model's when the columns hold them. `lengths`, `group`, `rank`: [responses], as `score_flat`'s."""
    none = np.zeros(0, dtype=np.int64)
    flat = np.asarray(lengths, dtype=np.float64)

    def pick(values: np.ndarray) -> np.ndarray:
        return score_flat(values, group, rank, none, none, none, none.astype(bool), groups)["best_of_k"]

    return {"longest_best_of_k": pick(flat), "shortest_best_of_k": pick(-flat)}


def summarize_scores(
    scores: dict[str, np.ndarray], prompt_ids: np.ndarray | None = None, *, samples: int = 1000, seed: int = 0
) -> dict[str, float | int | list[float]]:
    """The group metrics of `score_groups` columns (a subset's rows, or all of them), keyed as eval.json holds them.

    `prompt_ids[g]` is group g's prompt (None: each group its own): the interval resamples prompts, so that
    several pairwise records of one prompt move together, as the pairs of one group do.
    """
    nan = float("nan")
    sums, counts, taus, best, top1 = (scores[k] for k in ("right", "strict", "tau", "best_of_k", "top1"))
    groups = len(sums)
    prompt = np.arange(groups) if prompt_ids is None else np.unique(np.asarray(prompt_ids), return_inverse=True)[1]
    prompt = prompt.reshape(-1)
    prompts = int(prompt.max()) + 1 if groups else 0
    lo, hi = ratio_bootstrap_ci(
        np.bincount(prompt, sums, prompts), np.bincount(prompt, counts, prompts), samples=samples, seed=seed
    )
    ties, strict = int(scores["ties"].sum()), int(counts.sum())

    def rate_ci(values: np.ndarray) -> list[float]:
        """The interval of a per-group rate (top-1, best-of-K) over the groups that have one, prompts resampled."""
        has = np.isfinite(values)
        per_prompt = np.bincount(prompt, np.where(has, values, 0.0), prompts), np.bincount(prompt, has, prompts)
        return list(ratio_bootstrap_ci(*per_prompt, samples=samples, seed=seed))

    def mean_of(values: np.ndarray) -> float:
        return float(np.nanmean(values)) if np.isfinite(values).any() else nan

    chance = {k: scores.get(k, np.full(groups, nan)) for k in ("top1_chance", "best_of_k_chance")}
    picks = {}
    for key in ("longest_best_of_k", "shortest_best_of_k"):
        if key in scores:  # the length controls, where the caller measured the responses
            picks |= {key: mean_of(scores[key]), f"{key}_ci95": rate_ci(scores[key])}
    return {
        "accuracy": float(sums.sum() / strict) if strict else nan,
        "n": strict,
        "groups": groups,
        "prompts": prompts,
        "accuracy_ci95": [lo, hi],
        "top1_accuracy": mean_of(top1),
        "top1_ci95": rate_ci(top1),
        "top1_chance": mean_of(chance["top1_chance"]),
        "best_of_k_accuracy": mean_of(best),
        "best_of_k_ci95": rate_ci(best),
        "best_of_k_chance": mean_of(chance["best_of_k_chance"]),
        "kendall_tau": float(np.nanmean(taus)) if np.isfinite(taus).any() else nan,
        "tied_pairs": ties,
        "tie_mean_abs_diff": float(scores["tie_gap"].sum() / ties) if ties else nan,
        "strict_mean_abs_diff": float(scores["strict_gap"].sum() / strict) if strict else nan,
    } | picks


def group_summary(
    rewards: list[np.ndarray],
    ranks: list[np.ndarray],
    pairs: list[np.ndarray | None] | None = None,
    prompt_ids: np.ndarray | None = None,
    *,
    samples: int = 1000,
    seed: int = 0,
) -> dict[str, float | int | list[float]]:
    """The group metrics of one set of groups (a subset, or all of them), keyed as eval.json holds them."""
    return summarize_scores(score_groups(rewards, ranks, pairs), prompt_ids, samples=samples, seed=seed)
