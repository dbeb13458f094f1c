"""The text of `rm eval`'s report: the console table and report.md, both from eval.json's dict.

Kept apart from the scoring (rm/evaluation/split_rewards.py, eval_result.py) so the words and tables can change
without touching how the numbers are made; every figure report.md shows is one of `eval_report.PLOTS`.
"""

from __future__ import annotations

import math


def _rows(result: dict) -> list[tuple[str, dict]]:
    return list(result["subsets"].items()) + [("overall", result["overall"])]


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
    return "\n".join(lines)


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def render_markdown(result: dict) -> str:
    """report.md: what was scored, then accuracy, calibration and length bias, each table with its figure."""
    e = result["eval"]
    o = result["overall"]
    md = [
        "# Reward model evaluation",
        "",
        f"- model: `{e['model']}`",
        f"- data: {e['data']}",
        scored_line(o, e),
        f"- bad records skipped (--on-bad-record skip): {sum(e['records_skipped'].values())} "
        f"{e['records_skipped'] or ''} (listed in eval.json)",
        f"- intervals: {e['bootstrap']['method']} bootstrap over prompts ({o['prompts']}), "
        f"{e['bootstrap']['samples']} resamples, seed {e['bootstrap']['seed']}; lengths in {e['length_unit']}",
        "",
        "## Accuracy",
        "",
        "A pair is right when r_chosen > r_rejected (a tie counts half). *Longer wins* is how often the chosen",
        "response is the longer one; the *length rule* is the better of always picking the longer or always the",
        "shorter response. A reward model should beat the length rule by more than its interval.",
        "",
        "| subset | n | accuracy | 95% CI | ECE | longer wins | length rule | beats it? | acc. when chosen "
        "longer (n) | acc. when chosen shorter (n) |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for name, m in _rows(result):
        lo, hi = m["accuracy_ci95"]
        beats = "yes" if lo > m["length_rule_accuracy"] else "no (within or below the CI)"
        md.append(
            f"| {name} | {m['n']} | {_f(m['accuracy'])} | [{_f(lo)}, {_f(hi)}] | {_f(m['ece'])} | "
            f"{_f(m['longer_chosen_rate'])} | {m['length_rule']}: {_f(m['length_rule_accuracy'])} | {beats} | "
            f"{_f(m['accuracy_chosen_longer'])} ({m['n_chosen_longer']}) | "
            f"{_f(m['accuracy_chosen_shorter'])} ({m['n_chosen_shorter']}) |"
        )
    md += ["", "![accuracy per subset](accuracy.png)", ""]
    if has_groups(o):
        md += group_section(result)
    md += ["## Calibration", ""]
    md += [
        "P(chosen) = sigmoid(r_chosen - r_rejected). Confidence is max(P, 1 - P), binned on [0.5, 1]; ECE is the",
        "pair-weighted mean |accuracy - confidence| over the bins (0 is perfectly calibrated).",
        "",
        "| confidence bin | pairs | mean confidence | accuracy |",
        "| --- | ---: | ---: | ---: |",
    ]
    md += [
        f"| {b['lo']:.2f}-{b['hi']:.2f} | {b['n']} | {_f(b['confidence'])} | {_f(b['accuracy'])} |"
        for b in result["calibration"]["bins"]
        if b["n"]
    ]
    md += ["", "![reliability diagram](calibration.png)", "", "## Rewards", "", "![reward histograms](reward_hist.png)"]
    md += [
        "",
        "## Length bias",
        "",
        f"Over all pairs the chosen response is the longer one in {_f(o['longer_chosen_rate'])} of them. The model",
        f"scores the longer response higher in {_f(o['prefers_longer_rate'])} of the pairs of unequal length, and",
        f"its rewards have Spearman rho = {_f(o['reward_length_spearman'])} with response length.",
        "",
        "| len(chosen) - len(rejected) | pairs | RM accuracy | longer wins |",
        "| --- | ---: | ---: | ---: |",
    ]
    md += [
        f"| {b['lo']:+.0f} to {b['hi']:+.0f} | {b['n']} | {_f(b['accuracy'])} | {_f(b['longer_chosen_rate'])} |"
        for b in result["length_bins"]["overall"]
    ]
    md += ["", "![length bias](length_bias.png)", ""]
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


def group_section(result: dict) -> list[str]:
    """report.md's group metrics: one row per subset and overall, and their figure."""
    md = [
        "## Groups",
        "",
        "Accuracy above is over every strictly ordered pair of a group, the better response as the chosen one;",
        "tied pairs are not in it. *Top-1*: the highest reward went to a best-ranked response. *Best-of-K*: every",
        "best-ranked response beats every other one (RewardBench 2's count). *Kendall tau*: tau-b between rewards",
        "and ranks, the mean over groups. The mean absolute reward difference of tied pairs stands beside that of",
        "strict pairs (a model that sees the ties scores them closer).",
        "",
        "| subset | groups | prompts | pairs | accuracy | top-1 | best-of-K | Kendall tau | tied pairs | tied: mean "
        "abs. diff | strict: mean abs. diff |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, m in _rows(result):
        md.append(
            f"| {name} | {m['groups']} | {m['prompts']} | {m['n']} | {_f(m['accuracy'])} | {_f(m['top1_accuracy'])} | "
            f"{_f(m['best_of_k_accuracy'])} | {_f(m['kendall_tau'])} | {m['tied_pairs']} | "
            f"{_f(m['tie_mean_abs_diff'])} | {_f(m['strict_mean_abs_diff'])} |"
        )
    return md + ["", "![group metrics per subset](groups.png)", ""]
