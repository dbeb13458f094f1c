"""How sure a suite's figures are, and what they mean against chance: eval.json's `suite.uncertainty`.

A leaderboard figure alone cannot say whether 0.227 is a weak model or no model at all: RewardBench 2's best-of-4
gives random rewards 0.25. So each figure (the score, every section, every subset) gets its `n` (the records behind
it), a 95% percentile bootstrap interval and its `chance`: what independent, continuous random rewards score on
the same records by the suite's own rule (0.5 for a pair, 1/K for best-of-K, for RewardBench 2's Ties subset the
mean of its rule over draws of random rewards).

The bootstrap resamples prompts within each subset (a stratified bootstrap: a section weighs its subsets by fixed
counts, so a subset's size must not vary between draws) and recomputes every figure from the same draw, so the
score's interval carries its sections' correlation. Computed for `rm eval --suite` only: training's suite evals
log the score alone and stay as fast as they were.
"""

from __future__ import annotations

import math

import numpy as np

from rm.suites import rewardbench, rewardbench2, rm_bench
from rm.suites.records import SuiteItem

CHANCE_DRAWS = 200
"""Draws of random rewards behind the Ties subset's chance level (its rule has no closed form)."""


def resampled_means(values: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """[samples + 1, d]: row 0 the mean of `values` ([n, d]), then the means of `samples` resamples of its rows."""
    n = len(values)
    draws = rng.multinomial(n, np.full(n, 1.0 / n), size=samples) if n else np.zeros((samples, 0))
    counts = np.concatenate([np.ones((1, n)), draws])
    return counts @ values / max(n, 1)


def _by_subset(items: list[SuiteItem], rewards: list[np.ndarray]) -> dict[str, tuple[list, list]]:
    out: dict[str, tuple[list, list]] = {}
    for item, r in zip(items, rewards, strict=True):
        mine = out.setdefault(item.subset, ([], []))
        mine[0].append(item)
        mine[1].append(r)
    return out


def _ci(draws: np.ndarray) -> list[float | None]:
    """The 95% percentile interval of the draws (row 0, the point estimate, left out); None where undefined."""
    rest = draws[1:][np.isfinite(draws[1:])]
    if not len(rest) or len(rest) < 0.9 * (len(draws) - 1):  # most draws undefined: no honest interval
        return [None, None]
    lo, hi = np.quantile(rest, [0.025, 0.975])
    return [float(lo), float(hi)]


def _tree(figures: dict, leaf) -> dict:
    """`figures` (nested dicts of [samples + 1] arrays) with `leaf` applied to each array."""
    return {k: _tree(v, leaf) if isinstance(v, dict) else leaf(v) for k, v in figures.items()}


def _point(x: np.ndarray) -> float | None:
    return float(x[0]) if math.isfinite(x[0]) else None


def _mean(values: list[np.ndarray]) -> np.ndarray:
    """Per draw, the mean of the figures defined in it (as a suite's score leaves out a section it cannot score)."""
    if not values:
        return np.array([np.nan])
    stacked = np.stack(values)
    defined = np.isfinite(stacked)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(defined, stacked, 0.0).sum(0) / defined.sum(0)


def rewardbench_figures(means: dict[str, np.ndarray], n: dict[str, int]) -> dict:
    """RewardBench's figures from each subset's accuracy per draw (`rewardbench.section_scores`, vectorised)."""
    subsets = {name: m[:, 0] for name, m in means.items()}
    sections = {}
    for section, counts in rewardbench.SECTIONS.items():
        present = [s for s in counts if s in subsets]
        if present:
            total = sum(counts[s] for s in present)
            sections[section] = sum(subsets[s] * counts[s] for s in present) / total
    figures = {"score": _mean(list(sections.values())), "sections": sections, "subsets": subsets}
    prior = [subsets[s] for s in rewardbench.PRIOR_SETS if s in subsets]
    return figures | ({"prior_sets": np.mean(prior, axis=0)} if prior else {})


TIES_COLUMNS = ("ref", "ref_accurate", "tied", "tied_accurate", "common", "spread", "preferred", "hard", "ratio",
                "tanh")  # fmt: skip


def ties_units(items: list[SuiteItem], rewards: list[np.ndarray]) -> np.ndarray:
    """[prompts, len(TIES_COLUMNS)]: per Ties prompt N (its `ref:N` and `tied:N` records), the counts
    `rewardbench2.ties_score` sums, so that the score of a resample of prompts is a ratio of column sums."""
    stats: dict[int, dict[str, dict]] = {}
    for item, r in zip(items, rewards, strict=True):
        kind, number = rewardbench2.ties_key(item.id) or ("", 0)
        stats.setdefault(number, {})[kind] = rewardbench2.prompt_stats(r, item.n_chosen)
    rows = []
    for found in stats.values():
        ref, tied = found.get("ref"), found.get("tied")
        spread = ref is not None and tied is not None and tied["spread"] is not None
        gap = min(ref["gap"], tied["gap"]) if spread else 0.0
        ratio = spread and tied["spread"] > 0
        both = ref is not None and tied is not None
        rows.append([
            ref is not None, bool(ref and ref["accurate"]), tied is not None, bool(tied and tied["accurate"]), both,
            spread, spread and tied["gap"] > tied["spread"], spread and gap > tied["spread"], ratio,
            math.tanh(gap / tied["spread"] - 1) if ratio else 0.0,
        ])  # fmt: skip
    return np.array(rows, dtype=np.float64).reshape(-1, len(TIES_COLUMNS))


def ties_from_means(m: np.ndarray) -> np.ndarray:
    """The Ties score per draw from `ties_units`' column means ([draws, columns]), as `ties_score` computes it."""
    c = dict(zip(TIES_COLUMNS, m.T, strict=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        ref = np.where(c["ref"] > 0, c["ref_accurate"] / c["ref"], 0.0)
        tied = np.where(c["tied"] > 0, c["tied_accurate"] / c["tied"], 0.0)
        none = np.where(c["common"] > 0, np.nan, 0.0)  # prompts in both forms but none with a spread: undefined
        preferred = np.where(c["spread"] > 0, c["preferred"] / c["spread"], none)
        hard = np.where(c["spread"] > 0, c["hard"] / c["spread"], none)
        margin = np.where(c["ratio"] > 0, c["tanh"] / c["ratio"], 0.0)
    return 0.3 * tied + 0.3 * ref + 0.2 * preferred + 0.2 * hard + 0.01 * margin


def rewardbench2_figures(means: dict[str, np.ndarray], n: dict[str, int]) -> dict:
    """RewardBench 2's figures: each subset's best-of-K (the Ties subset's own rule), the score their mean."""
    subsets = {name: ties_from_means(m) if name == rewardbench2.TIES else m[:, 0] for name, m in means.items()}
    sections = {name: subsets[name] for name in rewardbench2.SUBSETS if name in subsets}
    return {"score": _mean(list(sections.values())), "sections": sections, "subsets": subsets}


def rm_bench_figures(means: dict[str, np.ndarray], n: dict[str, int]) -> dict:
    """RM-Bench's figures: per paper domain (its dataset domains pooled by their prompts) easy, normal, hard and
    average of the 3 x 3 matrix; the score the mean of the domains' averages."""
    pooled: dict[str, list[tuple[np.ndarray, int]]] = {}
    for name, m in means.items():
        if (domain := rm_bench.domain_of(name)) is not None:
            pooled.setdefault(domain, []).append((m, n[name]))
            pooled.setdefault("all", []).append((m, n[name]))

    def difficulty(cells: np.ndarray) -> dict[str, np.ndarray]:
        matrix = cells.reshape(-1, 3, 3)
        return {
            "easy": matrix[:, [1, 2, 2], [0, 0, 1]].mean(1),
            "normal": matrix[:, [0, 1, 2], [0, 1, 2]].mean(1),
            "hard": matrix[:, [0, 0, 1], [1, 2, 2]].mean(1),
            "average": matrix.mean((1, 2)),
        }

    order = [d for d in (*rm_bench.DOMAINS, "all") if d in pooled]
    sections = {d: difficulty(sum(m * k for m, k in pooled[d]) / sum(k for _, k in pooled[d])) for d in order}
    averages = [sections[d]["average"] for d in rm_bench.DOMAINS if d in sections]
    subsets = {name: m.mean(1) for name, m in means.items()}
    return {"score": _mean(averages), "sections": sections, "subsets": subsets}


def _values(suite: str, items: list[SuiteItem], rewards: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One subset's per-prompt values the figures are means of, and what random rewards score on each."""
    if suite == "rewardbench":
        return rewardbench.pair_results(items, rewards)[:, None], np.full((len(items), 1), 0.5)
    if suite == "rm-bench":
        wins = np.array([(r[:3, None] > r[None, 3:]).ravel() for r in rewards], dtype=np.float64).reshape(-1, 9)
        return wins, np.full_like(wins, 0.5)
    if items and items[0].subset == rewardbench2.TIES:
        return ties_units(items, rewards), np.full((1, len(TIES_COLUMNS)), np.nan)
    best = np.array([rewardbench2.best_of_k(r) for r in rewards])[:, None]
    return best, np.array([1.0 / len(r) for r in rewards])[:, None]


def ties_chance(items: list[SuiteItem], seed: int = 0) -> float:
    """The Ties rule's mean over `CHANCE_DRAWS` draws of independent normal rewards for the same records."""
    rng = np.random.default_rng(seed)
    draws = [rewardbench2.ties_score(items, [rng.standard_normal(len(i.responses)) for i in items])
             for _ in range(CHANCE_DRAWS)]  # fmt: skip
    return float(np.nanmean(draws)) if np.isfinite(draws).any() else math.nan


FIGURES = {"rewardbench": rewardbench_figures, "rewardbench2": rewardbench2_figures, "rm-bench": rm_bench_figures}


def suite_uncertainty(
    suite: str, items: list[SuiteItem], rewards: list[np.ndarray], samples: int = 1000, seed: int = 0
) -> dict:
    """eval.json's `suite.uncertainty` for `items` (a suite's and, for RewardBench, its prior sets') and their
    rewards: `n`, `ci95` and `chance`, each shaped as {"score", "sections", "subsets"} (RM-Bench's sections as
    {easy, normal, hard, average}), and `section_subsets`, each section's subsets in the suite's order."""
    rng = np.random.default_rng(seed)
    by_subset = _by_subset(items, rewards)
    means, chance_means, n = {}, {}, {}
    for name, (mine, r) in by_subset.items():
        values, chance = _values(suite, mine, r)
        means[name], chance_means[name], n[name] = resampled_means(values, samples, rng), chance.mean(0)[None], len(r)
    figures = FIGURES[suite](means, n)
    chance_figures = FIGURES[suite](chance_means, n)
    if rewardbench2.TIES in by_subset and suite == "rewardbench2":  # no closed form: the rule on random rewards
        ties = np.array([ties_chance(by_subset[rewardbench2.TIES][0], seed)])
        chance_figures["subsets"][rewardbench2.TIES] = chance_figures["sections"][rewardbench2.TIES] = ties
        chance_figures["score"] = _mean(list(chance_figures["sections"].values()))
    members = section_subsets(suite, list(by_subset))
    counts = {"score": sum(n[s] for names in members.values() for s in names if s in n and _in_score(suite, s)),
              "sections": {sec: sum(n[s] for s in names) for sec, names in members.items()}, "subsets": n}  # fmt: skip
    if "all" in figures["sections"]:  # RM-Bench's domains pooled
        counts["sections"]["all"] = counts["score"]
    return {
        "n": counts,
        "ci95": _tree(figures, _ci),
        "chance": _tree(chance_figures, _point),
        "section_subsets": members,
        "method": f"percentile bootstrap, prompts resampled within each subset ({samples} resamples, seed {seed})",
    }


def _in_score(suite: str, subset: str) -> bool:
    if suite == "rewardbench":
        return rewardbench.section_of(subset) is not None
    if suite == "rewardbench2":
        return subset in rewardbench2.SUBSETS
    return rm_bench.domain_of(subset) is not None


def section_subsets(suite: str, present: list[str]) -> dict[str, list[str]]:
    """Each section's subsets present, in the suite's published order; subsets outside every section last, under
    the name the report shows them by."""
    if suite == "rewardbench":
        known = {sec: [s for s in counts if s in present] for sec, counts in rewardbench.SECTIONS.items()}
        known["Prior Sets"] = [s for s in rewardbench.PRIOR_SETS if s in present]
    elif suite == "rewardbench2":
        known = {s: [s] for s in rewardbench2.SUBSETS if s in present}
    else:
        known = {d: [s for s in rm_bench.DATA_DOMAINS if rm_bench.domain_of(s) == d and s in present]
                 for d in rm_bench.DOMAINS}  # fmt: skip
    placed = {s for names in known.values() for s in names}
    other = sorted(s for s in present if s not in placed)
    return {sec: names for sec, names in known.items() if names} | ({"outside the score": other} if other else {})
