"""eval.json's `attributes` block: how well a model's attribute outputs predict the records' scores.

Per attribute, overall and per subset, over the responses that have a score (a missing one is skipped and
counted): the RMSE of output against score, Pearson's r, and Spearman's rho (Pearson's r of the ranks, tied
values sharing the mean of their ranks, as scipy.stats.spearmanr ranks them: ratings on a 0-4 scale tie often);
for an attribute scored only 0 or 1 (correct or not) also `auc`, the ROC area of its output (Mann-Whitney).
A model without attribute outputs has no block, so its eval.json is what it always was.

    {"helpfulness": {"overall": {"rmse", "pearson", "spearman", "n", "missing"[, "auc"]}, "subsets": {...}}, ...}

An undefined number (fewer than 2 scored responses, or a constant output or score) is NaN, null in eval.json.
"""

from __future__ import annotations

import numpy as np
import torch

from rm.evaluation.metrics import pearson, rankdata, spearman
from rm.evaluation.summary import by_subset


def auc(pred: np.ndarray, label: np.ndarray) -> float:
    """The area under the ROC curve of `pred` for the 0/1 `label`: Mann-Whitney's P(pred of a 1 > pred of a 0),
    a tie counting 1/2, from the average ranks (sum of the 1s' ranks less n1 (n1 + 1) / 2, over n1 n0). NaN
    without both classes."""
    positive = label == 1
    n1, n0 = int(positive.sum()), int((~positive).sum())
    if not n1 or not n0:
        return float("nan")
    return float((rankdata(pred)[positive].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def is_binary(true: np.ndarray) -> bool:
    """Whether an attribute's scores (NaN: missing) are all 0 or 1, so that its output ranks a yes/no rating: a
    scale declared [0, 1] with only 0/1 values, or a 0/1 column whose scale was inferred from the data."""
    scored = true[~np.isnan(true)]
    return bool(len(scored)) and bool(np.isin(scored, (0.0, 1.0)).all())


def fit_numbers(pred: np.ndarray, true: np.ndarray, binary: bool = False) -> dict[str, float | int]:
    """RMSE, Pearson and Spearman of one attribute's outputs `pred` against its scores `true` ([responses] each,
    a score NaN where missing: skipped, counted in `missing`; an output that is not finite is skipped too), and
    for a `binary` (0/1) attribute the `auc` of its output."""
    pred, true = np.asarray(pred, dtype=np.float64), np.asarray(true, dtype=np.float64)
    scored = ~np.isnan(true)
    used = scored & np.isfinite(pred)
    p, t = pred[used], true[used]
    numbers = {
        "rmse": float(np.sqrt(np.mean((p - t) ** 2))) if len(p) else float("nan"),
        "pearson": pearson(p, t),
        "spearman": spearman(p, t),
        "n": int(used.sum()),
        "missing": int((~scored).sum()),
    }
    return numbers | ({"auc": auc(p, t)} if binary else {})


def attribute_block(
    pred: np.ndarray, true: np.ndarray, subset_ids: np.ndarray, attributes: list[str], subsets: list[str]
) -> dict[str, dict]:
    """eval.json's `attributes`: `fit_numbers` per attribute, overall and per subset, from every response's
    outputs `pred` and scores `true` ([responses, A] each) and its subset (`subset_ids[i]` indexes `subsets`); an
    attribute whose scores are all 0/1 (`is_binary`, over every response) has `auc` in each of its blocks."""
    blocks = {}
    for a, name in enumerate(attributes):
        binary = is_binary(true[:, a])
        blocks[name] = by_subset(
            lambda mask, a=a, b=binary: fit_numbers(pred[mask, a], true[mask, a], b), subset_ids, subsets
        )
    return blocks


def gathered_block(gathered: dict[str, torch.Tensor], attributes: list[str], subsets: list[str]) -> dict[str, dict]:
    """`attribute_block` of `gather_rewards`' result (rm/evaluation/gather.py), each response once."""
    subset_ids = gathered["subset"][gathered["group"]].numpy()
    return attribute_block(
        gathered["attribute_outputs"].double().numpy(),
        gathered["attribute_scores"].double().numpy(),
        subset_ids,
        attributes,
        subsets,
    )


def attribute_lines(result: dict) -> list[str]:
    """The console summary's attribute lines (overall per attribute), [] for a model without attribute outputs."""
    if not result.get("attributes"):
        return []

    def num(x: float | None) -> str:
        return "n/a" if x is None or np.isnan(x) else f"{x:.4f}"

    w = max(9, *(len(name) for name in result["attributes"]))
    binary = any("auc" in block["overall"] for block in result["attributes"].values())  # a column only then
    head = f"{'attribute':<{w}}      n  missing    RMSE  Pearson  Spearman" + ("     AUC" if binary else "")
    lines = ["", head, "-" * len(head)]
    for name, block in result["attributes"].items():
        m = block["overall"]
        lines.append(
            f"{name:<{w}}  {m['n']:5d}  {m['missing']:7d}  {num(m['rmse']):>6}  {num(m['pearson']):>7}  "
            f"{num(m['spearman']):>8}" + (f"  {num(m['auc']) if 'auc' in m else '':>6}" if binary else "")
        )
    return lines
