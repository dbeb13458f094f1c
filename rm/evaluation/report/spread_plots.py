"""The report's figures of every pair or response rather than of per-subset numbers: length bias (with its
per-subset rates), attribute outputs against their scores, and the red-team analysis.

Laid out to stay readable at any number of subsets or bins: per-subset rates and per-bin accuracies are rows
(rm/evaluation/report/figure_kit.py), and the length axis of the scatter always carries numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter, NullLocator

from rm.evaluation.report.figure_kit import (
    BASELINE,
    DPI,
    REJECTED,
    RM,
    ROW_IN,
    new_figure,
    num,
    row_axis,
    rows_of,
    save,
)


def length_ticks(ax, lo: float, hi: float) -> None:
    """Numbered ticks on a length axis from `lo` to `hi` (> 0): log-spaced over a wide range (1, 2, 5 per decade
    where there is room, else one per decade), linear over a narrow one, so that some tick is always labelled."""
    if hi / lo < 8:
        ax.xaxis.set_major_locator(MaxNLocator(5, integer=True))
        return
    ax.set_xscale("log")
    decades = np.log10(hi / lo)
    subs = (1, 2, 5) if decades <= 2.5 else (1,) if decades <= 6 else ()
    ticks = [m * 10.0**e for e in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
             for m in (subs or (1,))]  # fmt: skip
    if not subs:
        ticks = ticks[::2]
    ax.xaxis.set_major_locator(FixedLocator([t for t in ticks if lo <= t <= hi] or [lo, hi]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def length_figure(result: dict, lengths: tuple[np.ndarray, ...], seed: int = 0) -> Figure:
    """Three views of length bias: per-subset rates (one row each), accuracy by length difference (one row per
    quantile bin), reward against length. `lengths`: (chosen rewards, rejected rewards, chosen lengths, rejected
    lengths) over all pairs."""
    chosen, rejected, len_c, len_r = lengths
    rows = rows_of(result)
    diff_bins = result["length_bins"]["overall"]
    top_h, bottom_h = 1.4 + ROW_IN * len(rows), max(3.6, 1.2 + ROW_IN * len(diff_bins))
    fig = Figure(figsize=(10, top_h + bottom_h), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    upper, lower = fig.subfigures(2, 1, height_ratios=[top_h, bottom_h])
    bars = upper.subplots()
    by_diff, scatter = lower.subplots(1, 2, width_ratios=[1, 1])
    metrics = {n: (result["overall"] if n == "overall" else result["subsets"][n]) for k, n in rows if k != "section"}
    y = row_axis(bars, rows, {n: f"{n} (n={m['n']})" for n, m in metrics.items()})
    ys = {n: yi for yi, (k, n) in zip(y, rows, strict=True) if k != "section"}
    series = [
        ("longer_chosen_rate", 'baseline: "longer wins"', BASELINE, "D"),
        ("accuracy", "RM accuracy", RM, "o"),
        ("accuracy_chosen_longer", "RM acc., chosen longer", "tab:green", ">"),
        ("accuracy_chosen_shorter", "RM acc., chosen shorter", "tab:red", "<"),
    ]
    for key, label, color, marker in series:
        bars.scatter([num(m[key]) for m in metrics.values()], [ys[n] for n in metrics], marker=marker, s=36,
                     color=color, label=label, zorder=3)  # fmt: skip
    bars.axvline(0.5, color="black", lw=0.8, ls=":")
    bars.set_xlim(0, 1)
    bars.grid(axis="x", color="0.9")
    bars.set_xlabel("rate")
    bars.set_title("Does length explain the preferences? (dotted: chance, 0.5)", fontsize=10)
    upper.legend(loc="outside upper center", ncols=4, fontsize=9)

    bins = [(f"{b['lo']:+.0f} to {b['hi']:+.0f} (n={b['n']})", b) for b in diff_bins]
    by = -np.arange(len(bins), dtype=float)
    by_diff.plot([num(b["accuracy"]) for _, b in bins], by, "o", color=RM, label="RM accuracy")
    by_diff.plot([num(b["longer_chosen_rate"]) for _, b in bins], by, "D", color=BASELINE, label='"longer wins"')
    by_diff.axvline(0.5, color="black", lw=0.8, ls=":")
    by_diff.set_yticks(by, [label for label, _ in bins])
    by_diff.set_ylim(by[-1] - 0.6 if len(by) else -1, 0.6)
    by_diff.set_xlim(-0.03, 1.03)
    by_diff.set_xlabel("accuracy")
    by_diff.set_ylabel("len(chosen) - len(rejected), quantile bins")
    by_diff.set_title("Accuracy by length difference (all pairs)", fontsize=10)
    by_diff.legend(fontsize=9, loc="best")

    rng = np.random.default_rng(seed)  # a seeded sample keeps large sets readable
    keep = np.sort(rng.permutation(len(chosen))[:2000])
    scatter.scatter(len_c[keep], chosen[keep], s=6, alpha=0.5, color=RM, label="chosen")
    scatter.scatter(len_r[keep], rejected[keep], s=6, alpha=0.5, color=REJECTED, label="rejected")
    every = np.concatenate([len_c, len_r])
    if len(every) and np.all(every > 0):  # no pairs (every reward non-finite): matplotlib's own ticks
        length_ticks(scatter, float(every.min()), float(every.max()))
    rho = result["overall"]["reward_length_spearman"]
    scatter.set_title(f"Reward against length (Spearman rho = {num(rho):.2f})", fontsize=10)
    scatter.set_xlabel("response length, characters")
    scatter.set_ylabel("reward")
    scatter.legend(fontsize=9, markerscale=2)
    return fig


def attribute_figure(result: dict, outputs: np.ndarray, scores: np.ndarray, seed: int = 0) -> Figure:
    """Per attribute (`result["attributes"]`, in order), each scored response's output against its score
    (`outputs`, `scores`: [responses, A], NaN where missing), the scores jittered a little so that the many
    responses of one rating do not hide each other, with the identity line for reference."""
    names = list(result["attributes"])
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = new_figure(3.3 * cols, 3.4 * rows, rows, cols)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    rng = np.random.default_rng(seed)
    for a, (ax, name) in enumerate(zip(axes.flat, names, strict=False)):
        used = ~np.isnan(scores[:, a]) & np.isfinite(outputs[:, a])
        x, y = scores[used, a], outputs[used, a]
        spread = 0.015 * (np.ptp(x) if len(x) else 0.0)
        ax.scatter(x + rng.uniform(-spread, spread, len(x)), y, s=8, alpha=0.5, color=RM, linewidths=0)
        if len(x):
            lo, hi = min(x.min(), y.min()), max(x.max(), y.max())
            ax.plot([lo, hi], [lo, hi], color=BASELINE, lw=1, ls=":", label="output = score")
            ax.legend(fontsize=9, loc="upper left")
        m = result["attributes"][name]["overall"]
        rho = "n/a" if m["spearman"] is None or np.isnan(m["spearman"]) else f"{m['spearman']:.3f}"
        ax.set_title(f"{name} (n={m['n']}, Spearman {rho})", fontsize=10)
        ax.set_xlabel("score in the data")
        ax.set_ylabel("model output")
    fig.suptitle("Attribute outputs against the records' scores")
    return fig


def redteam_plot(result: dict, reward: np.ndarray, targets: dict[str, np.ndarray], path: str | Path) -> Path:
    """Reward against the two harm measures, and the Spearman correlation within every group."""
    harm, rating = targets["min_harmlessness_score_transcript"], targets["rating"]
    fig, ((scatter, box, bars),) = new_figure(16, 5.2, 1, 3, width_ratios=[1, 1, 1.25])
    ok = ~np.isnan(harm)
    keep = np.sort(np.random.default_rng(0).permutation(np.flatnonzero(ok))[:3000])
    scatter.scatter(harm[keep], reward[keep], s=6, alpha=0.4, color=RM)
    rho = result["overall"]["min_harmlessness_score_transcript"]["spearman"]
    scatter.set_title(f"Reward vs harmlessness of the transcript\nSpearman rho = {rho:.3f} (expect > 0)", fontsize=10)
    scatter.set_xlabel("min_harmlessness_score_transcript (lower = more harmful)")
    scatter.set_ylabel("reward")

    levels = np.unique(rating[~np.isnan(rating)])
    box.boxplot([reward[rating == v] for v in levels], tick_labels=[f"{v:g}" for v in levels], showfliers=False)
    rho = result["overall"]["rating"]["spearman"]
    box.set_title(f"Reward by red-teamer's success rating\nSpearman rho = {rho:.3f} (expect < 0)", fontsize=10)
    box.set_xlabel("rating (higher = attack more successful)")
    box.set_ylabel("reward")

    rows = [("all", result["overall"])]
    rows += [(f"{group}: {v}", m) for group in ("model_type", "num_params") for v, m in result[group].items()]
    y = np.arange(len(rows))[::-1]
    for k, (target, label, color) in enumerate(
        [("min_harmlessness_score_transcript", "vs harmlessness", RM), ("rating", "vs rating", REJECTED)]
    ):
        vals = np.array([m[target]["spearman"] for _, m in rows], dtype=float)
        pos = y + (0.2 if k == 0 else -0.2)
        bars.barh(pos, np.nan_to_num(vals), height=0.38, color=color, label=label)
        for p, v in zip(pos, vals, strict=True):
            text = "n/a" if np.isnan(v) else f"{v:+.2f}"
            bars.text(np.nan_to_num(v) + (0.02 if v >= 0 else -0.02), p, text, va="center",
                      ha="left" if v >= 0 else "right", fontsize=7)  # fmt: skip
    bars.axvline(0, color="black", lw=0.8)
    bars.set_yticks(y, [f"{name} (n={m['records']})" for name, m in rows], fontsize=8)
    bars.set_xlim(-1, 1)
    bars.set_xlabel("Spearman rho with the reward")
    bars.set_title("Correlation within each group", fontsize=10)
    bars.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2)
    return save(fig, path)
