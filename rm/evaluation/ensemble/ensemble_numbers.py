"""eval.json's `ensemble` block: M reward models scored on the same items, combined per response, and whether their
disagreement predicts where the combination goes wrong.

Pure functions of the items and each member's rewards (numpy, float64), with no model and no process group, so a
test checks every number against one computed another way. Per response, over the members' raw rewards r_1..r_M
(not normalized: members fine-tuned from one initialization share its scale, which is what averaging them assumes):

- mean = (1/M) sum_m r_m: the ensemble's reward. eval.json's top-level numbers are the mean's, so a tool that
  reads eval.json reads the ensemble as it reads one model;
- std = sqrt((1/M) sum_m (r_m - mean)^2), ddof 0: the spread of these members, not an estimate for more of them;
- conservative = mean - k std: the "mean minus std" aggregation of Eisenstein et al. 2023 (Helping or Herding?
  Reward model ensembles mitigate but do not eliminate reward hacking), a lower confidence bound in the spirit of
  Coste et al. 2023's uncertainty-weighted objective (which subtracts the variance instead).

A pair's uncertainty is the std over members of its margin r_chosen - r_rejected: what the members disagree on is
the order of the two responses, not each response's level (a member that scores everything 1 higher changes every
response's std, and no margin). Whether it predicts errors is the ROC AUC (Mann-Whitney, rm/evaluation/
attribute_metrics.py's `auc`) of that std for the pairs the mean orders wrongly against those it orders right: 0.5
says nothing, 1 says every wrong pair is more uncertain than every right one. A pair the mean ties is in neither.
The raw std grows with the margin (members that agree a pair is clear still differ by how much), so beside it
`auc_relative` ranks pairs by std / |mean margin|, the disagreement measured against the decision: on the tiny
models of the merge check (docs/export.md) the raw std's AUC was 0.30 to 0.45, the relative one's 0.59 to 0.76.
"""

from __future__ import annotations

import numpy as np

from rm.data.load import Example
from rm.evaluation.attribute_metrics import auc
from rm.evaluation.eval_result import build_result, comparisons_of, strict_pairs

ACCURACY_KEYS = ("accuracy", "accuracy_ci95", "n")
"""What the block keeps of each model's numbers: the top-level accuracy, its interval (a bootstrap over prompts:
rm/evaluation/ranking_metrics.py) and its pair count, overall and per subset."""

TOP_LEVEL = (
    "eval.json's top-level numbers (overall, subsets, calibration, length bias) are the ensemble mean's: each "
    "response's reward is the mean of the members' rewards"
)
UNCERTAINTY = "std over members (ddof 0) of a pair's margin r_chosen - r_rejected"


def spread(stack: np.ndarray) -> np.ndarray:
    """The std over axis 0 (members), ddof 0, taken of each member's difference to the first one: the same number,
    except that members that agree give exactly 0 (the mean of three equal floats need not be that float)."""
    stack = np.asarray(stack, dtype=np.float64)
    return np.std(stack - stack[:1], axis=0)


def combine(stack: np.ndarray, k: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, std, mean - k std) over axis 0 of every member's values, [M, ...] -> [...] each, float64. A value
    that is not finite in any member is not finite (NaN or infinite) in all three."""
    stack = np.asarray(stack, dtype=np.float64)
    mean, std = stack.mean(axis=0), spread(stack)
    return mean, std, mean - k * std


def accuracy_of(result: dict) -> dict:
    """The accuracy, its interval and n of an eval result (`build_result`'s dict), overall and per subset."""
    pick = lambda m: {key: m[key] for key in ACCURACY_KEYS}  # noqa: E731
    return {"overall": pick(result["overall"]), "subsets": {k: pick(m) for k, m in result["subsets"].items()}}


def accuracy_block(items: list[Example], rewards: list[np.ndarray], samples: int, seed: int) -> dict:
    """`accuracy_of` the eval result of `rewards` (per item, one reward per response, NaN: not scored): exactly the
    accuracy and interval `rm eval` reports for a model that scored them."""
    return accuracy_of(build_result(items, rewards, samples, seed))


def margins(items: list[Example], mean: list[np.ndarray], members: list[list[np.ndarray]]) -> tuple[np.ndarray, ...]:
    """(the mean's margin [pairs], every member's margin [M, pairs]) of every strictly ordered pair that the mean
    scores (a response some member left unscored is NaN in the mean: its pairs are in no member's margins)."""
    comparisons = [comparisons_of(item, r) for item, r in zip(items, mean, strict=True)]
    _, chosen, rejected, _, _ = strict_pairs(items, mean, comparisons)
    each = [strict_pairs(items, r, comparisons)[1:3] for r in members]
    return chosen - rejected, np.stack([c - r for c, r in each]) if each else np.zeros((0, len(chosen)))


def uncertainty_block(items: list[Example], mean: list[np.ndarray], members: list[list[np.ndarray]]) -> dict:
    """Whether the members' disagreement on a pair (`UNCERTAINTY`) predicts that the mean orders it wrongly: the AUC
    of the std for the wrong pairs against the right ones, with the counts and each side's mean std. The AUC is
    None, with a note saying why, where it is undefined: no wrong pair or no right one, or one std for every pair
    (members that agree everywhere, std 0, rank no pair above another)."""
    margin, each = margins(items, mean, members)
    std = spread(each) if len(each) else np.zeros(len(margin))
    wrong, right = margin < 0, margin > 0
    decided = wrong | right
    note = None
    if not wrong.any() or not right.any():
        note = f"the mean orders {'no' if not wrong.any() else 'every'} pair wrongly: no errors and successes to tell"
    elif np.ptp(std[decided]) == 0:
        note = f"every pair has the same std over members ({std[decided][0]:g}): it cannot rank one above another"
    value = None if note else auc(std[decided], wrong[decided].astype(int))
    relative = std / np.maximum(np.abs(margin), np.finfo(float).tiny)
    return {
        "of_a_pair": UNCERTAINTY,
        "auc": value,
        "auc_relative": None if note else auc(relative[decided], wrong[decided].astype(int)),
        "pairs_wrong": int(wrong.sum()),
        "pairs_right": int(right.sum()),
        "pairs_tied": int((~decided).sum()),
        "mean_std_wrong": float(std[wrong].mean()) if wrong.any() else None,
        "mean_std_right": float(std[right].mean()) if right.any() else None,
        "note": note,
    }


def reward_std(std: list[np.ndarray]) -> dict:
    """The mean and the largest std over members of a response's reward, over the responses every member scored."""
    values = np.concatenate(std) if std else np.zeros(0)
    values = values[np.isfinite(values)]
    return {"mean": float(values.mean()) if len(values) else None, "max": float(values.max()) if len(values) else None}


def ensemble_block(
    items: list[Example],
    names: list[str],
    members: list[list[np.ndarray]],
    combined: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]],
    mean_result: dict,
    k: float,
    samples: int,
    seed: int,
    merged: tuple[str, list[np.ndarray]] | None = None,
) -> dict:
    """eval.json's `ensemble`: each member's accuracy (overall and per subset, with its interval), the mean's (from
    `mean_result`, the top-level numbers), the conservative reward's, the merged model's where one was scored beside
    them, the spread of the rewards and the uncertainty's AUC. `members[m][i]`: member m's rewards of item i;
    `combined`: (mean, std, conservative) per item, as `combine` gives them per response."""
    mean, std, conservative = combined
    acc = lambda rewards: accuracy_block(items, rewards, samples, seed)  # noqa: E731
    return {
        "top_level": TOP_LEVEL,
        "members": [{"model": name} | acc(rewards) for name, rewards in zip(names, members, strict=True)],
        "mean": accuracy_of(mean_result),
        "conservative": {"k": k} | acc(conservative),
        "merged": None if merged is None else {"model": merged[0]} | acc(merged[1]),
        "reward_std": reward_std(std),
        "uncertainty": uncertainty_block(items, mean, members),
    }
