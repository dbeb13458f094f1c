"""Every figure report.html shows, as matplotlib figures before they are written: what a check of the figures
(font sizes, overlapping texts) reads, from the same inputs and the same functions
rm/evaluation/eval_report.py's `write_report` draws them with."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from rm.data.load import Example
from rm.evaluation.eval_result import best_and_others, strict_pairs
from rm.evaluation.report import plots
from rm.evaluation.report.markdown import has_groups
from rm.evaluation.report.spread_plots import attribute_figure, length_figure


def report_figures(
    result: dict,
    kept: list[Example],
    rewards: list[np.ndarray],
    seed: int = 0,
    fits: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Figure]:
    """file name -> figure, for eval.json's `result` and its scored items `kept` with their `rewards` (`fits`: every
    response's attribute outputs and scores, for a model with attribute outputs)."""
    grouped = has_groups(result["overall"])
    labels = ("best-ranked", "others") if grouped else ("chosen", "rejected")
    hist = best_and_others(kept, rewards, list(result["subsets"]))
    figures = {
        "accuracy.png": plots.accuracy_figure(result),
        "calibration.png": plots.calibration_figure(result),
        "reward_hist.png": plots.reward_hist_figure(hist, result, labels),
        "length_bias.png": length_figure(result, strict_pairs(kept, rewards)[1:], seed),
    }
    if grouped:
        figures["groups.png"] = plots.group_figure(result)
    if fits is not None:
        figures["attributes.png"] = attribute_figure(result, *fits, seed)
    return figures
