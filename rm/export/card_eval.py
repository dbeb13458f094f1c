"""The model card's 'Evaluation' section: the eval.json numbers of these weights, and the rules they were counted by.

The rules are stated as rm/evaluation/metrics.py and rm/evaluation/ranking_metrics.py apply them: a pair given two
equal rewards counts half, and pairs the data ranks equal are left out of accuracy (the card once said "a tie counts
half" of a group run, whose tied pairs were not counted at all). Where the eval set holds groups of K responses, the
group metrics (top-1, best-of-K, Kendall tau) follow in a table of their own. Kept apart from rm/export/card.py for
that module's size.
"""

from __future__ import annotations

import math

from rm.config import RunConfig
from rm.data.data_report import shown_path
from rm.evaluation.report.markdown import has_groups


def eval_section(cfg: RunConfig, eval_result: dict | None, eval_origin: str = "run") -> str:
    if eval_result is None:
        return (
            "## Evaluation\n\nNot evaluated: the run's `eval.json` describes its final weights, not this checkpoint. "
            "Export again with `--eval` to score the run's held-out pairs with these weights.\n"
        )
    split = f"`{cfg.data.eval_split}` split" if cfg.data.eval_split else f"seeded {cfg.data.eval_fraction:.0%} hold-out"
    origin = "at the end of the run" if eval_origin == "run" else "when this folder was exported"
    overall = eval_result["overall"]
    groups = has_groups(overall)
    lines = ["## Evaluation", "", f"Held-out {'groups' if groups else 'pairs'} of `{shown_path(cfg.data.source)}` "
             f"({split}), scored {origin}. {tie_rule(overall) if groups else PAIR_RULE}", "",
             "| subset | pairs | accuracy | mean margin | mean r(chosen) | mean r(rejected) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    rows = list(eval_result["subsets"].items()) + [("**overall**", overall)]
    for name, m in rows:
        keys = ("accuracy", "mean_margin", "mean_chosen_reward", "mean_rejected_reward")
        lines.append(f"| {name} | {m['n']} | " + " | ".join(number(m.get(k)) for k in keys) + " |")
    if groups:
        lines += ["", RANKING_TEXT, "", "| subset | groups | top-1 accuracy | best-of-K accuracy | Kendall tau |",
                  "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for name, m in rows:
            cells = [with_chance(m, "top1"), with_chance(m, "best_of_k"), number(m.get("kendall_tau"))]
            lines.append(f"| {name} | {m.get('groups')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def with_chance(m: dict, key: str) -> str:
    """A group metric, with what random rewards score on the same groups where eval.json has that bar."""
    chance = m.get(f"{key}_chance")
    return number(m.get(f"{key}_accuracy")) + (f" (chance {number(chance)})" if chance is not None else "")


PAIR_RULE = (
    "Accuracy is the share of pairs whose chosen response gets the higher reward (a pair given two equal rewards "
    "counts half); margin is the mean of r(chosen) - r(rejected)."
)
"""How the eval counts pairs (rm/evaluation/metrics.py: `correct`)."""
RANKING_TEXT = (
    "Per group: top-1 accuracy, whether the highest reward goes to a best-ranked response (shared evenly where "
    "several share the highest reward); best-of-K accuracy, whether every best-ranked response beats every other; "
    "Kendall tau, the tau-b between rewards and ranks, averaged over groups. A group whose responses all tie is "
    "left out of top-1 and best-of-K, and one with no order on either side out of Kendall tau."
)
"""The group metrics (rm/evaluation/ranking_metrics.py) as the card's second table states them."""


def tie_rule(overall: dict) -> str:
    """How the eval of groups counts pairs and ties (rm/evaluation/ranking_metrics.py), with this eval's tie counts."""
    ties = overall.get("tied_pairs") or 0
    gap = f"; their rewards differ by {number(overall.get('tie_mean_abs_diff'))} on average" if ties else ""
    return (
        "Accuracy is over every strictly ordered pair of every group: the share whose better-ranked response gets "
        "the higher reward, a pair given two equal rewards counting half; margin and the mean rewards are over the "
        f"same pairs, r(chosen) the better one. Pairs the data ranks equal are left out of accuracy ({ties} tied "
        f"pairs here{gap})."
    )


def number(value: float | None) -> str:
    """A metric as the card shows it: 4 decimals, or "n/a" where eval.json has none (null: no pairs, or rewards
    that were not finite)."""
    return f"{value:.4f}" if isinstance(value, int | float) and math.isfinite(value) else "n/a"
