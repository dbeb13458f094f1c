"""The ensemble's part of `rm eval`'s report, from eval.json's `ensemble` block (ensemble_numbers.py): one table of
every model scored (each member, their mean, the conservative reward, the merged model) with its accuracy and
interval, overall and per subset, and the sentences that say what the rows are and whether the members'
disagreement flags the mean's errors. For the console, report.md and report.html alike (one `Table` each)."""

from __future__ import annotations

import math

from rm.evaluation.report.suite_text import ci_text

Table = tuple[list[str], list[str], list[list[str]]]
"""(header, alignment, rows), as rm/evaluation/report/markdown.py's tables."""


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def rows_of(block: dict) -> list[tuple[str, str, dict]]:
    """(model, role, its accuracies) for every model the block scored, members first."""
    rows = [(m["model"], "member", m) for m in block["members"]]
    rows.append((f"mean of the {len(block['members'])} members", "ensemble (top-level numbers)", block["mean"]))
    k = block["conservative"]["k"]
    rows.append((f"mean - {k:g} std", "conservative", block["conservative"]))
    if block.get("merged"):
        rows.append((block["merged"]["model"], "merged", block["merged"]))
    return rows


def ensemble_table(block: dict) -> Table:
    """Every model scored: n, accuracy and its interval overall, then each subset's accuracy and interval."""
    subsets = list(block["mean"]["subsets"])
    head = ["model", "role", "n", "accuracy", "95% CI", *subsets]
    rows = []
    for name, role, m in rows_of(block):
        o = m["overall"]
        cells = [name, role, str(o["n"]), _f(o["accuracy"]), ci_text(o["accuracy_ci95"])]
        for subset in subsets:
            s = m["subsets"].get(subset)
            cells.append(f"{_f(s['accuracy'])} {ci_text(s['accuracy_ci95'])}" if s else "n/a")
        rows.append(cells)
    return head, ["---", "---", "---:", "---:", "---"] + ["---"] * len(subsets), rows


def about(block: dict) -> list[str]:
    """What the rows are, and that the rest of the report is the mean's."""
    std = block["reward_std"]
    return [
        "Each member scored the same responses as `rm eval` scores one model. The ensemble's reward for a response",
        "is the *mean* of the members' rewards: every other section of this report, and eval.json's top-level",
        f"numbers, are the mean's. The *conservative* reward is mean - {block['conservative']['k']:g} std, the std",
        f"over members (ddof 0) of the raw rewards (per response: mean {_f(std['mean'], 4)}, largest",
        f"{_f(std['max'], 4)}). Intervals: 95%, bootstrap over prompts, as in the accuracy table below.",
    ]


def uncertainty_text(block: dict) -> list[str]:
    """Whether the std over members of a pair's margin is larger on the pairs the mean orders wrongly."""
    u = block["uncertainty"]
    counts = (
        f"the {u['pairs_wrong']} pairs the mean orders wrongly against the {u['pairs_right']} it orders right "
        f"({u['pairs_tied']} tied, in neither)"
    )
    if u["auc"] is None:
        return [f"*Uncertainty* ({u['of_a_pair']}): its AUC for {counts} is undefined: {u['note']}."]
    return [
        f"*Uncertainty* ({u['of_a_pair']}): AUC {_f(u['auc'])} for {counts}; mean std {_f(u['mean_std_wrong'], 4)}",
        f"on the wrong pairs, {_f(u['mean_std_right'], 4)} on the right ones. 0.5: the members' disagreement says",
        "nothing of the mean's errors; 1: every wrong pair is more uncertain than every right one. Relative to the",
        f"margin (std / |mean margin|): AUC {_f(u['auc_relative'])}.",
    ]


def ensemble_markdown(block: dict, md_table) -> list[str]:
    """report.md's Ensemble section (`md_table` writes a `Table` as markdown lines)."""
    return ["## Ensemble", "", *about(block), "", *md_table(ensemble_table(block)), "", *uncertainty_text(block), ""]


def ensemble_lines(block: dict) -> str:
    """The console summary: one line per model scored (overall accuracy and interval), then the uncertainty."""
    rows = rows_of(block)
    w = max(5, *(len(name) for name, _, _ in rows))
    head = f"{'model':<{w}}  {'role':<12}      n  accuracy  95% CI"
    lines = ["", head, "-" * len(head)]
    for name, role, m in rows:
        o = m["overall"]
        lines.append(f"{name:<{w}}  {role.split()[0]:<12}  {o['n']:5d}  {_f(o['accuracy'], 4):>8}  "
                     f"{ci_text(o['accuracy_ci95'], 4)}")  # fmt: skip
    return "\n".join([*lines, " ".join(uncertainty_text(block)).replace("*", "")])
