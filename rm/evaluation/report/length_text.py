"""The length controls in words: the console's length line (`rm eval` and `rm train`) and the table report.md and
report.html show under "Length bias", all from eval.json's summaries.

A reward model's accuracy means little beside what length alone scores on the same data: always picking the longer
answer scores 100% on some leaderboard subsets. So every report puts the length-only rules (the longer or shorter
answer of a pair, the longest or shortest of a group, scored by the same rules as the model) beside the model's own
figures, with how much its rewards follow length (Spearman's rho, Pearson's r and its size).
"""

from __future__ import annotations

import math

from rm.evaluation.report.suite_text import ci_text

Table = tuple[list[str], list[str], list[list[str]]]

UNITS = {"characters": "chars", "tokens": "tokens"}
"""The unit's short name on the console line, by the first word of eval.json's length unit."""

CONTROL_TEXT = [
    "*Longer wins*: how often always picking the longer response of a pair is right (ties half); the *length rule*",
    "is the better of that and always picking the shorter one. *Model prefers longer*: how often the model scores",
    "the longer response of a pair of unequal length higher. Spearman's rho and Pearson's r are of reward with",
    "length over the responses of the pairs; |r| near 0 means a reward that length does not buy.",
]
GROUP_CONTROL_TEXT = [
    "*Longest pick* and *shortest pick*: the best-of-K of always picking the longest (shortest) response, by the",
    "model's best-of-K rule over the same groups (every best-ranked response strictly longer, or shorter, than every",
    "other one), with intervals that resample prompts; 1.0 means length alone ranks every group.",
]


def _f(x: object, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def unit_of(result: dict) -> str:
    """The unit lengths were measured in: `rm eval`'s `eval.length_unit` (characters), a run's own `length_unit`
    (tokens: a run keeps no text past encoding)."""
    said = (result.get("eval") or {}).get("length_unit") or result.get("length_unit") or "characters"
    return UNITS.get(said.split()[0], said.split()[0])


def length_line(result: dict, groups: bool) -> str | None:
    """The console's one line of length controls for the result's overall summary, with the longest and shortest
    picks beside the model's best-of-K where the data has `groups`; None where it has none (no lengths)."""
    o = result["overall"]
    if "longer_chosen_rate" not in o:
        return None
    unit = unit_of(result)
    parts = [
        f"longer wins {_f(o['longer_chosen_rate'])} of pairs ({o['length_rule']} {_f(o['length_rule_accuracy'])})",
        f"model prefers longer {_f(o['prefers_longer_rate'])}",
        f"|pearson(reward, {unit})| {_f(o.get('reward_length_abs_pearson'))}",
    ]
    if groups:
        parts.append(
            f"best-of-K {_f(o.get('best_of_k_accuracy'))} against longest pick {_f(o.get('longest_best_of_k'))}, "
            f"shortest pick {_f(o.get('shortest_best_of_k'))}"
        )
    return f"length ({unit}): " + "; ".join(parts)


def control_table(rows: list[tuple[str, dict]], groups: bool) -> Table:
    """The length controls per subset and overall (`rows`: name, summary). With `groups`, each group's best-of-K
    beside the longest and shortest picks, with intervals and chance (report.html marks them as headline numbers:
    their n is the groups)."""
    head = ["subset", "pairs" if groups else "n", "accuracy", "longer wins", "length rule", "model prefers longer",
            "Spearman rho", "Pearson r", "abs. Pearson r"]  # fmt: skip
    if groups:
        head += ["groups", "best-of-K", "best-of-K 95% CI", "chance", "longest pick", "longest pick 95% CI",
                 "shortest pick", "shortest pick 95% CI"]  # fmt: skip
    table = []
    for name, m in rows:
        cells = [name, str(m["n"]), _f(m["accuracy"]), _f(m["longer_chosen_rate"]),
                 f"{m['length_rule']}: {_f(m['length_rule_accuracy'])}", _f(m["prefers_longer_rate"]),
                 _f(m["reward_length_spearman"]), _f(m.get("reward_length_pearson")),
                 _f(m.get("reward_length_abs_pearson"))]  # fmt: skip
        if groups:
            cells += [str(m.get("groups", "n/a")), _f(m.get("best_of_k_accuracy")), ci_text(m.get("best_of_k_ci95")),
                      _f(m.get("best_of_k_chance")), _f(m.get("longest_best_of_k")),
                      ci_text(m.get("longest_best_of_k_ci95")), _f(m.get("shortest_best_of_k")),
                      ci_text(m.get("shortest_best_of_k_ci95"))]  # fmt: skip
        table.append(cells)
    align = ["---" if h in ("subset", "length rule") or h.endswith("95% CI") else "---:" for h in head]
    return head, align, table


def control_text(groups: bool) -> list[str]:
    """The words above the controls' table."""
    return CONTROL_TEXT + (GROUP_CONTROL_TEXT if groups else [])
