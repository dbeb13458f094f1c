"""eval.json's content for `rm eval`: the numbers (every item's comparisons, the strictly ordered pairs among
them, and the pairwise and group metrics over those, per subset; the rewards each histogram draws), and the
sentences of its `eval` block that say which data was scored (`describe_data`, `training_overlap`).

Kept apart from scoring (rm/evaluation/split_rewards.py) and from the recipe and its files
(rm/evaluation/eval_report.py) so the numbers are a pure function of the items and their rewards: a test builds
them from rewards it chose, with no model and no process group.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rm.config import DataConfig
from rm.config.exportdir import RUN_CONFIG, ExportDir
from rm.data.data_report import DataReport
from rm.data.formats.group import pairs_of, rank_of, responses_of
from rm.data.load import Example
from rm.evaluation import metrics, ranking_metrics
from rm.evaluation.summary import by_subset, with_group_metrics


def comparisons_of(item: Example, rewards: np.ndarray) -> np.ndarray:
    """The item's comparisons [n, 3] (a, b, tie; a the better unless tied) among its scored responses (`rewards`
    not NaN: encoding drops a response too long for max_length, and every comparison it was in), as training's
    layouts list them (rm/collate/padded.py's `comparisons`)."""
    explicit = pairs_of(item)
    if explicit is None:
        pairs = ranking_metrics.rank_comparisons(np.array(rank_of(item)))
    else:
        pairs = np.array([(a, b, int(tie)) for a, b, tie in explicit], dtype=np.int64).reshape(-1, 3)
    scored = ~np.isnan(rewards)
    return pairs[scored[pairs[:, 0]] & scored[pairs[:, 1]]]


def build_result(items: list[Example], rewards: list[np.ndarray], samples: int, seed: int) -> dict:
    """eval.json's numbers for `items` (pairs and groups) and their rewards (same order; per item, one reward per
    response in the item's order, NaN where encoding dropped the response).

    The pairwise numbers (`metrics.pair_summary`: accuracy, calibration, length bias) are over every strictly
    ordered pair, the better response as the chosen one; the group metrics (`ranking_metrics`) beside them, and
    the interval resamples prompts (equal prompt texts). For pairs with distinct prompts: the pairwise report."""
    comparisons = [comparisons_of(item, r) for item, r in zip(items, rewards, strict=True)]
    chosen_item, chosen, rejected, len_c, len_r = strict_pairs(items, rewards, comparisons)
    names = sorted({p.subset for p in items})
    subset_ids = np.array([names.index(p.subset) for p in items], dtype=int)
    prompt_ids = np.unique([p.prompt for p in items], return_inverse=True)[1].reshape(-1)
    scored = [~np.isnan(r) for r in rewards]
    ranks = [np.array(rank_of(p))[k] for p, k in zip(items, scored, strict=True)]
    columns = ranking_metrics.score_groups(
        [r[k] for r, k in zip(rewards, scored, strict=True)],
        ranks,
        [renumbered(c, k) for c, k in zip(comparisons, scored, strict=True)],
    )
    # The length controls (always the longest, always the shortest) in characters, as the pairwise ones.
    chars = [np.array([len(t) for t in responses_of(p)], dtype=float)[k] for p, k in zip(items, scored, strict=True)]
    columns |= ranking_metrics.length_columns(chars, ranks)

    def summary(mask):
        pairs = mask[chosen_item]
        pairwise = metrics.pair_summary(
            chosen[pairs], rejected[pairs], len_c[pairs], len_r[pairs], samples=samples, seed=seed
        )
        sliced = {k: v[mask] for k, v in columns.items()}
        groups = ranking_metrics.summarize_scores(sliced, prompt_ids[mask], samples=samples, seed=seed)
        return with_group_metrics(pairwise, groups)

    def diff_bins(mask):
        pairs = mask[chosen_item]
        return metrics.length_diff_bins(chosen[pairs], rejected[pairs], len_c[pairs], len_r[pairs])

    return {
        **by_subset(summary, subset_ids, names),
        "calibration": {"bins": metrics.calibration_bins(chosen, rejected)},
        "length_bins": by_subset(diff_bins, subset_ids, names),
    }


def strict_pairs(
    items: list[Example], rewards: list[np.ndarray], comparisons: list[np.ndarray] | None = None
) -> tuple[np.ndarray, ...]:
    """Every strictly ordered pair of every item, the better response first: (its item, chosen reward, rejected
    reward, chosen length, rejected length), each [pairs]; for pairs, each pair's own."""
    if comparisons is None:
        comparisons = [comparisons_of(item, r) for item, r in zip(items, rewards, strict=True)]
    item_of = np.repeat(np.arange(len(items)), [len(c) for c in comparisons])
    flat = np.concatenate(comparisons) if comparisons else np.zeros((0, 3), dtype=np.int64)
    strict = flat[:, 2] == 0
    start = np.concatenate([[0], np.cumsum([len(r) for r in rewards])]).astype(np.int64)[item_of[strict]]
    a, b = start + flat[strict, 0], start + flat[strict, 1]
    every = np.concatenate(rewards) if rewards else np.zeros(0)
    chars = np.array([len(t) for item in items for t in responses_of(item)], dtype=float)
    return item_of[strict], every[a], every[b], chars[a], chars[b]


def renumbered(pairs: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """Comparisons among the scored responses, renumbered to their places among those."""
    place = np.cumsum(scored) - 1
    return np.stack([place[pairs[:, 0]], place[pairs[:, 1]], pairs[:, 2]], 1) if len(pairs) else pairs


def best_and_others(
    items: list[Example], rewards: list[np.ndarray], subsets: list[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per subset, the rewards of the best-ranked responses against the others' (a pair's chosen and rejected):
    what reward_hist.png draws. A response scored NaN is left out, and an item with none scored too."""
    rewards_of: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in subsets}
    for p, r in zip(items, rewards, strict=True):
        scored = ~np.isnan(r)
        if not scored.any():  # every reward non-finite: nothing of this item to draw
            continue
        rank = np.array(rank_of(p))
        best = rank == rank[scored].min()
        rewards_of[p.subset][0].extend(r[best & scored].tolist())
        rewards_of[p.subset][1].extend(r[~best & scored].tolist())
    return {n: (np.array(b), np.array(w)) for n, (b, w) in rewards_of.items()}


def describe_data(data: DataConfig, report: DataReport) -> str:
    """Which pairs were scored, in a sentence (eval.json's `eval.data`, report.md's first lines).

    `report` is the one `eval_pairs` filled: it counted the pairs a `max_eval_pairs` cap left out."""
    held_out = not data.eval_split
    split = data.train_split if held_out else data.eval_split
    how = f"`{data.source}`" + (f" (split `{split}`)" if not Path(data.source).is_file() else "")
    if held_out:
        how += (
            f", the held-out {data.eval_fraction:g} of it (split seed {data.split_seed}, stratified by subset, "
            "as training does)"
        )
    if report.notes.get("capped", {}).get("eval_left_out"):
        how += f", a seeded sample of {data.max_eval_pairs} pairs"
    return how


def _same_place(a: str, b: str) -> bool:
    """Two sources name the same data: equal names, or local paths to one file or folder."""
    if a == b:
        return True
    pa_, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa_.exists() and pb.exists() and pa_.resolve() == pb.resolve()


def training_overlap(model: str, data: DataConfig) -> str:
    """Why the pairs `data` picks are (partly) the model's own training pairs, from the run config saved with the
    export; "" when they are not, or when nothing says. `rm eval` of a run's export on its own training file gave no
    word although 216 of its 240 pairs were training pairs: the accuracy of pairs it learnt is no estimate."""
    folder = ExportDir(model)
    if not folder.from_rm:
        return ""
    trained, source = folder.training_data()
    split = data.train_split if not data.eval_split else data.eval_split
    is_file = Path(data.source).expanduser().is_file()
    inside = (
        is_file and Path(source).expanduser().is_dir() and _same_place(str(Path(data.source).parent.parent), source)
    )
    same_split = is_file and not inside or split == trained.get("train_split", "train")
    if not (_same_place(data.source, source) or inside) or not same_split:
        return ""
    own_holdout = not data.eval_split and not trained.get("eval_split")
    same_draw = data.eval_fraction == trained.get("eval_fraction") and data.split_seed == trained.get("split_seed", 0)
    if own_holdout and same_draw:
        return ""  # exactly the run's held-out pairs
    return (
        f"{data.source}" + ("" if is_file else f" (split {split})") + f" is the data {model} was trained on (its "
        f"{RUN_CONFIG}: data.source={trained.get('source')}, data.train_split={trained.get('train_split')}): "
        "pairs it trained on score higher than new ones; evaluate its held-out pairs (--holdout "
        f"{trained.get('eval_fraction')} --split-seed {trained.get('split_seed', 0)}) or its eval split instead"
    )
