"""A suite's length controls: what always picking the shortest (longest) answer scores by the suite's own rule,
beside the model's figures in eval.json, report.md, report.html and `rm eval`'s console: RewardBench 2's Focus
by hand (best-of-4 shares a tie at the top), then on the published-layout fixture against a count made here."""

import re

import numpy as np
import pytest
from suite_helpers import fixture_items, score

from rm.cli.evaluate import suite_table
from rm.evaluation.report.html_page import suite_html
from rm.evaluation.report.markdown import md_table
from rm.evaluation.report.suite_text import suite_markdown
from rm.suites.catalog import get_suite
from rm.suites.records import SuiteItem
from rm.suites.suite_length import length_controls


def sized(subset: str, rid: str, lengths: tuple[int, ...]) -> SuiteItem:
    """A one-correct-answer record (the first response) whose responses have these lengths in characters."""
    return SuiteItem("p", tuple("x" * n for n in lengths), 1, subset, f"hand:{rid}", rid)


# Focus: the correct answer is the shortest (1), tied shortest with one other (1/2), the longest (0), in between (0).
FOCUS = [("a", (3, 9, 8, 7)), ("b", (4, 4, 8, 9)), ("c", (20, 5, 6, 7)), ("d", (6, 5, 9, 9))]
MATH = [("e", (9, 3, 4, 5)), ("f", (2, 3, 4, 5))]  # shortest: 0, 1; longest: 1, 0


def test_focus_shortest_answer_control_by_hand():
    items = [sized("Focus", i, n) for i, n in FOCUS] + [sized("Math", i, n) for i, n in MATH]
    controls = length_controls(get_suite("rewardbench2"), items, [], samples=50, seed=0)
    short, long = controls["shortest"], controls["longest"]
    assert short["sections"] == {"Math": 0.5, "Focus": 0.375} and short["subsets"]["Focus"] == 0.375
    assert long["sections"] == {"Math": 0.5, "Focus": 0.25}
    assert short["score"] == pytest.approx((0.5 + 0.375) / 2) and long["score"] == pytest.approx((0.5 + 0.25) / 2)
    lo, hi = short["ci95"]["sections"]["Focus"]
    assert 0.0 <= lo <= 0.375 <= hi <= 1.0


def focus_by_hand(items: list[SuiteItem], sign: float) -> float:
    """Best-of-4 of the length (times `sign`) over the Focus records, counted here: the first response's share of
    the top."""
    scores = []
    for item in items:
        if item.subset == "Focus":
            values = [sign * len(t) for t in item.responses]
            top = max(values)
            scores.append(1.0 / values.count(top) if values[0] == top else 0.0)
    return float(np.mean(scores))


def test_the_suite_report_puts_the_controls_beside_the_models_figures(exported_tiny, tokenizer):
    run = score(exported_tiny, "rewardbench2")
    suite = run.result["suite"]
    items = fixture_items("rewardbench2", tokenizer)
    controls = suite["length_controls"]
    shortest = focus_by_hand(items, -1.0)
    assert controls["shortest"]["sections"]["Focus"] == pytest.approx(shortest)
    assert controls["longest"]["sections"]["Focus"] == pytest.approx(focus_by_hand(items, 1.0))

    md = "\n".join(suite_markdown(suite, md_table))
    focus = next(line for line in md.splitlines() if line.startswith("| Focus |") and "Focus" in line)
    head = next(line for line in md.splitlines() if line.startswith("| section |"))
    cells = dict(zip([c.strip() for c in head.strip("|").split("|")], [c.strip() for c in focus.strip("|").split("|")],
                     strict=True))  # fmt: skip
    assert cells["shortest answer"] == f"{shortest:.4f}" and cells["score"] == f"{suite['sections']['Focus']:.4f}"
    assert f"Focus {suite['sections']['Focus']:.4f} against {shortest:.4f}" in md

    page = "\n".join(suite_html(suite))
    row = re.search(r'<tr data-row="Focus">(.*?)</tr>', page.split('id="suite-sections"')[1]).group(1)
    cell = re.search(
        rf'<td class="num headline" data-n="2" data-ci95="[^"]+" data-chance="[^"]+">{shortest:.4f}</td>', row
    )
    assert cell is not None  # a headline number: its n, interval and chance level on the page

    line = next(x for x in suite_table(suite).splitlines() if x.startswith("  Focus: "))
    assert line.endswith(f"(shortest answer {shortest:.4f}, longest answer {focus_by_hand(items, 1.0):.4f})")
