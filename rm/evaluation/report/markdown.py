"""The text of `rm eval`'s report: the console table, and the tables report.md and report.html share, all from
eval.json's dict.

Kept apart from the scoring (rm/evaluation/split_rewards.py, eval_result.py) so the words and tables can change
without touching how the numbers are made; every figure report.md shows is one of `eval_report.PLOTS`. Each table
is made once, as a `Table` of plain-text cells: `md_table` writes it for report.md, html_page.py for report.html.
"""

from __future__ import annotations

import math

from rm.evaluation.attribute_metrics import attribute_lines
from rm.evaluation.ensemble.ensemble_text import ensemble_markdown
from rm.evaluation.report.length_text import control_table, control_text, length_line
from rm.evaluation.report.suite_text import against_chance, ci_text, subset_sections, suite_markdown

PAIR_CHANCE = 0.5
"""Pairwise accuracy of random rewards: the bar every accuracy is read against."""


def _rows(result: dict) -> list[tuple[str, dict]]:
    """Subsets grouped by a suite's sections (`subset_sections`), then overall."""
    return [(name, result["subsets"][name]) for name in subset_sections(result)] + [("overall", result["overall"])]


def has_groups(summary: dict) -> bool:
    """Whether the data holds more than pairs: a group of three or more responses (more strictly ordered pairs
    than groups) or a tie. Pairs alone keep the pairwise report; the group metrics are in eval.json either way."""
    return bool(summary.get("tied_pairs") or summary.get("n", 0) > summary.get("groups", summary.get("n", 0)))


def format_table(result: dict) -> str:
    """The console summary: one line per subset and overall."""
    rows = _rows(result)
    w = max(7, *(len(name) for name, _ in rows))
    head = (
        f"{'subset':<{w}}      n  accuracy  95% CI            ECE     longer-wins  length rule            "
        "rho(reward,len)"
    )
    lines = [head, "-" * len(head)]
    for name, m in rows:
        lo, hi = m["accuracy_ci95"]
        rule = f"{m['length_rule']} {m['length_rule_accuracy']:.4f}"
        lines.append(
            f"{name:<{w}}  {m['n']:5d}  {m['accuracy']:8.4f}  [{lo:.4f}, {hi:.4f}]  {m['ece']:.4f}  "
            f"{m['longer_chosen_rate']:11.4f}  {rule:<21}  {m['reward_length_spearman']:15.4f}"
        )
    if has_groups(result["overall"]):
        head = f"{'subset':<{w}}  groups  prompts  tied  top-1   best-of-K  Kendall tau"
        lines += ["", head, "-" * len(head)]
        lines += [
            f"{name:<{w}}  {m['groups']:6d}  {m['prompts']:7d}  {m['tied_pairs']:4d}  {_f(m['top1_accuracy'], 4):>6}  "
            f"{_f(m['best_of_k_accuracy'], 4):>9}  {_f(m['kendall_tau'], 4):>11}"
            for name, m in rows
        ]
    length = length_line(result, has_groups(result["overall"]))
    return "\n".join(lines + ([length] if length else []) + attribute_lines(result))


def length_controls(result: dict) -> Table:
    """The length controls beside the model's figures, per subset and overall (rm/evaluation/report/length_text.py)."""
    return control_table(_rows(result), has_groups(result["overall"]))


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


Table = tuple[list[str], list[str], list[list[str]]]
"""(header, alignment, rows): cells as plain text; an alignment cell is markdown's `---` (left) or `---:` (right)."""

ACCURACY_TEXT = [
    "A pair is right when r_chosen > r_rejected. *Chance*: random rewards get half the pairs right. *Longer wins*",
    "is how often the chosen response is the longer one; the *length rule* is the better of always picking the",
    "longer or always the shorter response. A reward model should beat the length rule by more than its interval",
    "(*beats it?*: the interval lies above it). *Against chance*: the interval lies above chance, BELOW it, or holds",
    "it (*within reach*: random rewards could have scored this).",
]
GROUP_TEXT = [
    "Accuracy above is over every strictly ordered pair of a group, the better response as the chosen one;",
    "tied pairs are not in it. *Top-1*: the highest reward went to a best-ranked response. *Best-of-K*: every",
    "best-ranked response beats every other one (RewardBench 2's count). Their *chance* is what random rewards score",
    "on the same groups: B/K for top-1 and 1/C(K, B) for best-of-K (1/K for one best of K), B the best-ranked ones;",
    "their intervals resample prompts, as accuracy's do. *Kendall tau*: tau-b between rewards",
    "and ranks, the mean over groups. The mean absolute reward difference of tied pairs stands beside that of",
    "strict pairs (a model that sees the ties scores them closer).",
]
CALIBRATION_TEXT = [
    "P(chosen) = sigmoid(r_chosen - r_rejected). Confidence is max(P, 1 - P), binned on [0.5, 1]; ECE is the",
    "pair-weighted mean |accuracy - confidence| over the bins (0 is perfectly calibrated).",
]
SOFT_TEXT = [
    "Pairs with a soft label (a preference strength, `loss.strength=soft`): P(chosen) against the label p, in 10",
    "equal-width bins of P on [0, 1]; ECE is the pair-weighted mean |mean P - mean p|, Brier the mean (P - p)^2.",
]

ATTRIBUTE_TEXT = [
    "Each attribute output (config.json's `id2label[1:]`; output 0 is the reward) against the records' scores of",
    "that name: RMSE, Pearson's r and Spearman's rho (ties share their mean rank) over the responses that have a",
    "score; *missing* counts those without one (left out). *AUC* (an attribute scored only 0 or 1): how often the",
    "output ranks a response scored 1 above one scored 0.",
]


def md_table(table: Table) -> list[str]:
    head, align, rows = table
    return ["| " + " | ".join(cells) + " |" for cells in [head, align, *rows]]


def accuracy_table(result: dict) -> Table:
    """Accuracy with its interval, calibration and the length baseline, per subset and overall."""
    head = ["subset", "n", "accuracy", "95% CI", "chance", "against chance", "ECE", "longer wins", "length rule",
            "beats it?", "acc. when chosen longer (n)", "acc. when chosen shorter (n)"]  # fmt: skip
    align = ["---", "---:", "---:", "---", "---:", "---", "---:", "---:", "---", "---", "---:", "---:"]
    rows = []
    for name, m in _rows(result):
        lo, hi = m["accuracy_ci95"]
        beats = "yes" if lo > m["length_rule_accuracy"] else "no"
        rows.append([
            name, str(m["n"]), _f(m["accuracy"]), f"[{_f(lo)}, {_f(hi)}]", _f(PAIR_CHANCE),
            against_chance([lo, hi], PAIR_CHANCE), _f(m["ece"]), _f(m["longer_chosen_rate"]),
            f"{m['length_rule']}: {_f(m['length_rule_accuracy'])}", beats,
            f"{_f(m['accuracy_chosen_longer'])} ({m['n_chosen_longer']})",
            f"{_f(m['accuracy_chosen_shorter'])} ({m['n_chosen_shorter']})",
        ])  # fmt: skip
    return head, align, rows


def group_table(result: dict) -> Table:
    """The group metrics per subset and overall (data with groups of three or more, or ties)."""
    head = ["subset", "groups", "prompts", "pairs", "accuracy", "top-1", "top-1 95% CI", "top-1 chance", "best-of-K",
            "best-of-K 95% CI", "best-of-K chance", "Kendall tau", "tied pairs", "tied: mean abs. diff",
            "strict: mean abs. diff"]  # fmt: skip
    rows = [
        [name, str(m["groups"]), str(m["prompts"]), str(m["n"]), _f(m["accuracy"]), _f(m["top1_accuracy"]),
         ci_text(m.get("top1_ci95")), _f(m.get("top1_chance")), _f(m["best_of_k_accuracy"]),
         ci_text(m.get("best_of_k_ci95")), _f(m.get("best_of_k_chance")), _f(m["kendall_tau"]), str(m["tied_pairs"]),
         _f(m["tie_mean_abs_diff"]), _f(m["strict_mean_abs_diff"])]
        for name, m in _rows(result)
    ]  # fmt: skip
    return head, ["---"] + ["---:"] * (len(head) - 1), rows


def calibration_table(result: dict) -> Table:
    rows = [
        [f"{b['lo']:.2f}-{b['hi']:.2f}", str(b["n"]), _f(b["confidence"]), _f(b["accuracy"])]
        for b in result["calibration"]["bins"]
        if b["n"]
    ]
    return ["confidence bin", "pairs", "mean confidence", "accuracy"], ["---", "---:", "---:", "---:"], rows


def soft_table(soft: dict) -> Table:
    """eval.json's `soft_calibration`: its non-empty bins, then ECE and Brier over all its pairs."""
    rows = [
        [f"{b['lo']:.1f}-{b['hi']:.1f}", str(b["n"]), _f(b["p_mean"]), _f(b["target_mean"]), "", ""]
        for b in soft["bins"]
        if b["n"]
    ]
    rows.append(["overall", str(soft["n"]), "", "", _f(soft["ece"]), _f(soft["brier"])])
    return ["P(chosen) bin", "pairs", "mean P", "mean label", "ECE", "Brier"], ["---"] + ["---:"] * 5, rows


def attribute_table(result: dict) -> Table:
    """One row per attribute and subset, then the attribute overall; an AUC column only where some attribute is
    scored 0/1 (eval.json's `auc`), blank for the others."""
    blocks = result["attributes"]
    binary = any("auc" in block["overall"] for block in blocks.values())
    rows = []
    for name, block in blocks.items():
        for subset, m in _rows(block):
            cells = [_f(m["rmse"]), _f(m["pearson"]), _f(m["spearman"])] + ([_f_or_blank(m, "auc")] if binary else [])
            rows.append([name, subset, *cells, str(m["n"]), str(m["missing"])])
    head = ["attribute", "subset", "RMSE", "Pearson", "Spearman"] + (["AUC"] if binary else []) + ["n", "missing"]
    return head, ["---", "---"] + ["---:"] * (len(head) - 2), rows


def _f_or_blank(m: dict, key: str) -> str:
    """A number of `m`, or an empty cell where `m` has none (an attribute that is not 0/1 has no AUC)."""
    return _f(m[key]) if key in m else ""


def length_text(o: dict) -> list[str]:
    return [
        f"Over all pairs the chosen response is the longer one in {_f(o['longer_chosen_rate'])} of them. The model",
        f"scores the longer response higher in {_f(o['prefers_longer_rate'])} of the pairs of unequal length, and",
        f"its rewards have Spearman rho = {_f(o['reward_length_spearman'])} and |Pearson r| = "
        f"{_f(o.get('reward_length_abs_pearson'))} with response length.",
    ]


def length_table(result: dict) -> Table:
    rows = [
        [f"{b['lo']:+.0f} to {b['hi']:+.0f}", str(b["n"]), _f(b["accuracy"]), _f(b["longer_chosen_rate"])]
        for b in result["length_bins"]["overall"]
    ]
    head = ["len(chosen) - len(rejected)", "pairs", "RM accuracy", "longer wins"]
    return head, ["---", "---:", "---:", "---:"], rows


def header_lines(result: dict) -> list[str]:
    """What was scored, as report.md's list items (without their "- ")."""
    e, o = result["eval"], result["overall"]
    return [
        f"model: `{e['model']}`",
        f"data: {e['data']}",
        scored_line(o, e)[2:],
        f"bad records skipped (--on-bad-record skip): {sum(e['records_skipped'].values())} "
        f"{e['records_skipped'] or ''} (listed in eval.json)",
        f"intervals: 95%, {e['bootstrap']['method']} bootstrap over prompts ({o['prompts']}), "
        f"{e['bootstrap']['samples']} resamples, seed {e['bootstrap']['seed']}; lengths in {e['length_unit']}",
        tie_rule(result),
    ]


def tie_rule(result: dict) -> str:
    """How a tie of rewards counts, said once for the whole report: rm's rule (rm/evaluation/metrics.py `correct`,
    ranking_metrics.py), and a suite's own where its leaderboard counts otherwise (rm/suites/rewardbench.py)."""
    rule = (
        "ties: a reward tie counts half (a tied pair is half right, in accuracy, calibration and AUC alike; top-1 "
        "is shared among the responses tied highest); best-of-K needs the best-ranked strictly above every other"
    )
    suite = (result.get("suite") or {}).get("name")
    if suite in ("rewardbench", "rm-bench"):
        rule += f"; {suite}'s own figures count a tie wrong, as its leaderboard does"
    elif suite == "rewardbench2":
        rule += "; rewardbench2's best-of-4 shares a tie at the top, as its leaderboard does"
    return rule


def render_markdown(result: dict) -> str:
    """report.md: what was scored, a suite's scores, then accuracy, calibration and length bias, each table with its
    figure."""
    o = result["overall"]
    md = ["# Reward model evaluation", "", *(f"- {line}" for line in header_lines(result)), ""]
    if result.get("suite"):
        md += suite_markdown(result["suite"], md_table)
    if result.get("ensemble"):  # several models: the rest of the report is their mean's
        md += ensemble_markdown(result["ensemble"], md_table)
    md += ["## Accuracy", "", *ACCURACY_TEXT, "", *md_table(accuracy_table(result))]
    md += ["", "![accuracy per subset](accuracy.png)", ""]
    if has_groups(o):
        md += ["## Groups", "", *GROUP_TEXT, "", *md_table(group_table(result))]
        md += ["", "![group metrics per subset](groups.png)", ""]
    md += ["## Calibration", "", *CALIBRATION_TEXT, "", *md_table(calibration_table(result))]
    if result.get("soft_calibration"):
        md += ["", *SOFT_TEXT, "", *md_table(soft_table(result["soft_calibration"]))]
    md += ["", "![reliability diagram](calibration.png)", "", "## Rewards", "", "![reward histograms](reward_hist.png)"]
    md += ["", "## Length bias", "", *length_text(o), "", *md_table(length_table(result)), ""]
    md += [*control_text(has_groups(o)), "", *md_table(length_controls(result))]
    md += ["", "![length bias](length_bias.png)", ""]
    if result.get("attributes"):
        md += ["## Attributes", "", *ATTRIBUTE_TEXT, "", *md_table(attribute_table(result))]
        md += ["", "![attribute outputs against scores](attributes.png)", ""]
    return "\n".join(md)


def scored_line(o: dict, e: dict) -> str:
    """What was scored of what was loaded, in pairs, or in groups where the data has them."""
    dropped = (
        f"{e['pairs_dropped_too_long']} dropped because they cannot fit max_length={e['max_length']} tokens with a "
        f"token of their prompt (listed in eval.json); {e['prompts_truncated']} prompts lost leading turns to fit"
    )
    if not has_groups(o):
        return f"- pairs: {o['n']} scored of {e['pairs_loaded']} loaded; {dropped}"
    lost = e.get("responses_dropped_too_long", 0)
    return (
        f"- groups: {o['groups']} scored of {e['pairs_loaded']} loaded ({o['prompts']} prompts, {o['n']} strictly "
        f"ordered pairs, {o['tied_pairs']} tied pairs); {dropped}; {lost} responses left their groups to fit"
    )
