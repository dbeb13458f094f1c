"""The eval report's figures, drawn with matplotlib's Agg canvas (no display, no pyplot global state).

Each `*_figure` function takes the numbers `rm.report` already computed (the eval.json dict, plus per-pair arrays
where a figure shows every pair) and returns the figure; each `*_plot` writes it as one PNG. Colours mean the same
thing in every figure: blue is the reward model / chosen, orange is rejected, grey is a baseline or chance. Sizes,
fonts and the one-row-per-subset layout are rm/evaluation/report/figure_kit.py's.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from rm.evaluation.report.figure_kit import (
    BASELINE,
    PAGE_WIDTH_PX,
    REJECTED,
    RM,
    ROW_IN,
    ci_of,
    fmt,
    interval,
    new_figure,
    num,
    row_axis,
    rows_of,
    value_axis,
)
from rm.evaluation.report.spread_plots import redteam_plot

__all__ = ["PAGE_WIDTH_PX", "redteam_plot"]
PAIR_CHANCE = 0.5


def _metrics(result: dict, name: str) -> dict:
    return result["overall"] if name == "overall" else result["subsets"][name]


def accuracy_figure(result: dict) -> Figure:
    """Per subset (grouped by section) and overall: accuracy with its 95% bootstrap interval, the best length-only
    rule as a grey diamond, and chance (0.5) as a dotted line; the numbers written beside each row."""
    rows = rows_of(result)
    fig, ((ax,),) = new_figure(8.5, 1.6 + ROW_IN * len(rows))
    y = row_axis(ax, rows, {n: f"{n} (n={_metrics(result, n)['n']})" for k, n in rows if k != "section"})
    data = [(yi, _metrics(result, n)) for yi, (k, n) in zip(y, rows, strict=True) if k != "section"]
    ys = np.array([yi for yi, _ in data])
    interval(ax, ys, [num(m["accuracy"]) for _, m in data], [ci_of(m, "accuracy_ci95") for _, m in data], RM,
             "accuracy, 95% CI")  # fmt: skip
    ax.scatter([num(m["length_rule_accuracy"]) for _, m in data], ys, marker="D", s=30, color=BASELINE, zorder=3,
               label="best length-only rule")  # fmt: skip
    ax.axvline(PAIR_CHANCE, color="black", lw=0.8, ls=":", label="chance (0.5)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("accuracy: P(r_chosen > r_rejected)")
    labels = {yi: f"{fmt(num(m['accuracy']))} [{fmt(ci_of(m, 'accuracy_ci95')[0])}, "
              f"{fmt(ci_of(m, 'accuracy_ci95')[1])}]" for yi, m in data}  # fmt: skip
    value_axis(ax, y, [labels.get(yi, "") for yi in y])
    ax.set_title("Pairwise accuracy per subset (95% bootstrap CI over prompts)", fontsize=10)
    fig.legend(loc="outside upper center", ncols=3, fontsize=9)
    return fig


def group_figure(result: dict) -> Figure:
    """Per subset, pairwise accuracy, top-1 and best-of-K side by side, each with its 95% interval (prompts
    resampled) and the chance level of random rewards on the same groups (a grey bar per row: 1/K varies)."""
    rows = rows_of(result)
    fig, axes = new_figure(10, 1.6 + ROW_IN * len(rows), 1, 3, sharey=True)
    panels = [("accuracy", "accuracy_ci95", None, "pairwise accuracy"), ("top1_accuracy", "top1_ci95", "top1_chance",
              "top-1"), ("best_of_k_accuracy", "best_of_k_ci95", "best_of_k_chance", "best-of-K")]  # fmt: skip
    labels = {n: f"{n} ({_metrics(result, n)['groups']} groups)" for k, n in rows if k != "section"}
    y = row_axis(axes[0][0], rows, labels)  # the panels share it
    for ax, (key, ci_key, chance_key, title) in zip(axes[0], panels, strict=True):
        data = [(yi, _metrics(result, n)) for yi, (k, n) in zip(y, rows, strict=True) if k != "section"]
        ys = np.array([yi for yi, _ in data])
        interval(ax, ys, [num(m.get(key)) for _, m in data], [ci_of(m, ci_key) for _, m in data], RM,
                 "value, 95% CI" if key == "accuracy" else None)  # fmt: skip
        chance = [PAIR_CHANCE if chance_key is None else num(m.get(chance_key)) for _, m in data]
        ax.scatter(chance, ys, marker="|", s=160, color=BASELINE, lw=2, zorder=3,
                   label="chance (random rewards)" if key == "accuracy" else None)  # fmt: skip
        ax.set_xlim(-0.03, 1.03)
        ax.set_xticks([0, 0.5, 1], ["0", "0.5", "1"])
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", color="0.9")
    fig.suptitle("Groups: pairwise accuracy, top-1 and best-of-K per subset (95% CI over prompts)", fontsize=10)
    fig.legend(loc="outside lower center", ncols=2, fontsize=9)
    return fig


def calibration_figure(result: dict) -> Figure:
    """Reliability diagram of max(P, 1-P) against accuracy, with the pair count of each bin below it; the
    per-subset ECE is in the accuracy table, the overall one in the title."""
    bins = [b for b in result["calibration"]["bins"] if b["n"]]
    fig, ((ax,), (hist,)) = new_figure(6, 6, 2, 1, sharex=True, height_ratios=[3, 1])
    width = result["calibration"]["bins"][0]["hi"] - result["calibration"]["bins"][0]["lo"]
    centers = [(b["lo"] + b["hi"]) / 2 for b in bins]
    ax.bar(centers, [b["accuracy"] for b in bins], width=width * 0.95, color=RM, alpha=0.8, label="accuracy in bin")
    ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], "o", color="black", ms=4,
            label="(mean confidence, accuracy)")  # fmt: skip
    ax.plot([0.5, 1.0], [0.5, 1.0], ls="--", color=BASELINE, label="perfect calibration")
    ax.set_xlim(0.5, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("accuracy (favoured is chosen)")
    ax.set_title(f"Calibration of P(chosen) = sigmoid(r_chosen - r_rejected)\noverall ECE = "
                 f"{fmt(num(result['overall']['ece']))}", fontsize=10)  # fmt: skip
    hist.bar(centers, [b["n"] for b in bins], width=width * 0.95, color=BASELINE)
    hist.set_ylabel("pairs")
    hist.set_xlabel("model confidence max(P, 1 - P)")
    fig.legend(loc="outside lower center", ncols=2, fontsize=9)
    return fig


def reward_hist_figure(
    rewards: dict[str, tuple[np.ndarray, np.ndarray]], result: dict, labels: tuple[str, str] = ("chosen", "rejected")
) -> Figure:
    """All subsets' chosen and rejected rewards (for groups, the best-ranked responses and the others, named by
    `labels`) as overlaid histograms on shared bins; with more than one subset, each subset's two distributions
    below as box plots (median, quartiles, 5th to 95th percentile), one row per subset."""
    names = [n for n in rewards if n in result["subsets"]]
    rows = [r for r in rows_of(result, overall=False) if r[0] == "section" or r[1] in rewards]
    many = len(names) > 1
    height = 3.2 + (1.0 + ROW_IN * 1.4 * len(rows) if many else 0)
    fig, axes = new_figure(9, height, 2 if many else 1, 1, height_ratios=[3.2, height - 3.2] if many else None)
    top = axes[0][0]
    chosen = np.concatenate([rewards[n][0] for n in names]) if names else np.zeros(0)
    rejected = np.concatenate([rewards[n][1] for n in names]) if names else np.zeros(0)
    both = np.concatenate([chosen, rejected])
    edges = np.histogram_bin_edges(both, bins=min(40, max(5, len(both) // 10))) if len(both) else 10
    for values, color, label in ((chosen, RM, labels[0]), (rejected, REJECTED, labels[1])):
        if len(values):
            top.hist(values, bins=edges, color=color, alpha=0.55, label=f"{label} (mean {values.mean():.2f})")
            top.axvline(values.mean(), color=color, lw=1.5)
    top.set_xlabel("reward")
    top.set_ylabel("responses")
    top.set_title(f"Rewards: {labels[0]} against {labels[1]}, all subsets", fontsize=10)
    if len(both):
        top.legend(fontsize=9)
    if many:
        ax = axes[1][0]
        y = row_axis(ax, rows, {n: f"{n} (n={result['subsets'][n]['n']})" for k, n in rows if k != "section"})
        for yi, (kind, name) in zip(y, rows, strict=True):
            if kind == "section":
                continue
            for shift, values, color in ((0.17, rewards[name][0], RM), (-0.17, rewards[name][1], REJECTED)):
                if len(values):
                    box = ax.boxplot([values], positions=[yi + shift], widths=0.28, orientation="horizontal",
                                     whis=(5, 95), showfliers=False, patch_artist=True, manage_ticks=False)  # fmt: skip
                    box["boxes"][0].set(facecolor=color, alpha=0.6)
                    box["medians"][0].set(color="black")
        ax.set_xlabel("reward")
        ax.set_title(f"Per subset: {labels[0]} (upper, blue) and {labels[1]} (lower, orange)", fontsize=10)
    return fig
