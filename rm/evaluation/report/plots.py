"""The eval report's figures, drawn with matplotlib's Agg canvas (no display, no pyplot global state).

Each function takes the numbers `rm.report` already computed (the eval.json dict, plus per-pair arrays
where a figure shows every pair) and writes one PNG. Colours mean the same thing in every figure:
blue is the reward model / chosen, orange is rejected, grey is a baseline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

RM, REJECTED, BASELINE = "tab:blue", "tab:orange", "0.55"


def new_figure(width: float, height: float, rows: int = 1, cols: int = 1, **kw):
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def save(fig: Figure, path: str | Path) -> Path:
    fig.savefig(path, dpi=110)
    return Path(path)


def _groups(result: dict) -> list[tuple[str, dict]]:
    """Subsets in order, then "overall" (only when there is more than one subset)."""
    rows = list(result["subsets"].items())
    return rows + [("overall", result["overall"])] if len(rows) != 1 else rows


def accuracy_plot(result: dict, path: str | Path) -> Path:
    """Bars of accuracy with 95% bootstrap intervals; the "longer wins" baseline as a grey diamond."""
    groups = _groups(result)
    fig, ((ax,),) = new_figure(max(4.5, 1.4 * len(groups) + 2), 4.2)
    x = np.arange(len(groups))
    acc = np.array([m["accuracy"] for _, m in groups])
    lo = np.array([m["accuracy_ci95"][0] for _, m in groups])
    hi = np.array([m["accuracy_ci95"][1] for _, m in groups])
    colors = [RM if name != "overall" else "tab:cyan" for name, _ in groups]
    ax.bar(x, acc, color=colors, width=0.6, label="RM accuracy")
    ax.errorbar(x, acc, yerr=[acc - lo, hi - acc], fmt="none", ecolor="black", capsize=6, label="95% bootstrap CI")
    base = [m["length_rule_accuracy"] for _, m in groups]
    ax.scatter(x, base, marker="D", s=60, color=BASELINE, zorder=3, label="baseline: best length-only rule")
    ax.axhline(0.5, color="black", lw=0.8, ls=":", label="chance")
    for xi, (_, m) in zip(x, groups, strict=True):
        lo_, hi_ = m["accuracy_ci95"]
        ax.text(xi, 0.02, f"{m['accuracy']:.3f}\n[{lo_:.3f}, {hi_:.3f}]", ha="center", va="bottom", fontsize=8.5,
                bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none", "pad": 1.5})  # fmt: skip
    ax.set_xticks(x, [f"{name}\nn={m['n']}\nlength rule: {m['length_rule']}" for name, m in groups])
    ax.set_ylabel("accuracy: P(r_chosen > r_rejected)")
    ax.set_title("Pairwise accuracy per subset (95% bootstrap CI)")
    ax.legend(loc="upper left", fontsize=8, ncols=2)
    ax.set_ylim(0, 1.15)
    ax.set_yticks(np.linspace(0, 1, 6))
    return save(fig, path)


def group_plot(result: dict, path: str | Path) -> Path:
    """Per subset, pairwise accuracy, top-1 and best-of-K side by side, with the pairwise 95% interval."""
    groups = _groups(result)
    fig, ((ax,),) = new_figure(max(5.0, 1.6 * len(groups) + 2), 4.2)
    x = np.arange(len(groups))
    series = [("accuracy", "pairwise accuracy", RM), ("top1_accuracy", "top-1", "tab:green"),
              ("best_of_k_accuracy", "best-of-K", "tab:purple")]  # fmt: skip
    w = 0.8 / len(series)
    for k, (key, label, color) in enumerate(series):
        vals = np.array([m[key] for _, m in groups], dtype=float)
        pos = x - 0.4 + w * (k + 0.5)
        ax.bar(pos, np.nan_to_num(vals), width=w, color=color, label=label)
        for p, v in zip(pos, vals, strict=True):
            ax.text(p, np.nan_to_num(v) + 0.01, "n/a" if np.isnan(v) else f"{v:.2f}", ha="center", fontsize=7)
    acc = np.array([m["accuracy"] for _, m in groups], dtype=float)
    lo = np.array([m["accuracy_ci95"][0] for _, m in groups], dtype=float)
    hi = np.array([m["accuracy_ci95"][1] for _, m in groups], dtype=float)
    ax.errorbar(x - 0.4 + w / 2, acc, yerr=[acc - lo, hi - acc], fmt="none", ecolor="black", capsize=4,
                label="95% CI (prompts resampled)")  # fmt: skip
    ax.set_xticks(x, [f"{name}\n{m['groups']} groups\n{m['n']} pairs" for name, m in groups])
    ax.set_ylim(0, 1.3)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("rate")
    ax.set_title("Groups: pairwise accuracy, top-1 and best-of-K per subset")
    ax.legend(loc="upper center", fontsize=8, ncols=4)
    return save(fig, path)


def calibration_plot(result: dict, path: str | Path) -> Path:
    """Reliability diagram of max(P, 1-P) against accuracy, with the pair count of each bin below it."""
    bins = [b for b in result["calibration"]["bins"] if b["n"]]
    fig, ((ax,), (hist,)) = new_figure(5.5, 5.6, 2, 1, sharex=True, height_ratios=[3, 1])
    width = result["calibration"]["bins"][0]["hi"] - result["calibration"]["bins"][0]["lo"]
    centers = [(b["lo"] + b["hi"]) / 2 for b in bins]
    ax.bar(centers, [b["accuracy"] for b in bins], width=width * 0.95, color=RM, alpha=0.8, label="accuracy in bin")
    ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], "o", color="black", ms=4,
            label="(mean confidence, accuracy)")  # fmt: skip
    ax.plot([0.5, 1.0], [0.5, 1.0], ls="--", color=BASELINE, label="perfect calibration")
    ax.set_xlim(0.5, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("accuracy (favoured response is the chosen one)")
    eces = [f"overall ECE = {result['overall']['ece']:.3f}"]
    if len(result["subsets"]) > 1:
        eces += [f"{name}: {m['ece']:.3f}" for name, m in result["subsets"].items()]
    ax.set_title("Calibration of P(chosen) = sigmoid(r_chosen - r_rejected)")
    ax.text(0.98, 0.04, "\n".join(eces), transform=ax.transAxes, ha="right", va="bottom", fontsize=9,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "0.8"})  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    hist.bar(centers, [b["n"] for b in bins], width=width * 0.95, color=BASELINE)
    hist.set_ylabel("pairs")
    hist.set_xlabel("model confidence max(P, 1 - P)")
    return save(fig, path)


def reward_hist_plot(
    rewards: dict[str, tuple[np.ndarray, np.ndarray]],
    result: dict,
    path: str | Path,
    labels: tuple[str, str] = ("chosen", "rejected"),
) -> Path:
    """Per subset, overlaid histograms of the chosen and the rejected rewards on shared bins (for groups, of the
    best-ranked responses and the others, named by `labels`)."""
    names = list(rewards)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = new_figure(4.2 * cols, 3.2 * rows, rows, cols)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names, strict=False):
        chosen, rejected = rewards[name]
        both = np.concatenate([chosen, rejected])
        edges = np.histogram_bin_edges(both, bins=min(40, max(5, len(both) // 10)))
        drawn = [(v, color, label) for v, color, label in ((chosen, RM, labels[0]), (rejected, REJECTED, labels[1]))
                 if len(v)]  # fmt: skip
        for values, color, label in drawn:
            ax.hist(values, bins=edges, color=color, alpha=0.55, label=f"{label} (mean {values.mean():.2f})")
        for values, color, _ in drawn:
            ax.axvline(values.mean(), color=color, lw=1.5)
        m = result["subsets"][name]
        ax.set_title(f"{name} (n={m['n']}, accuracy {m['accuracy']:.3f})", fontsize=10)
        ax.set_xlabel("reward")
        ax.set_ylabel("responses")
        if drawn:  # a subset whose every reward was non-finite has nothing to name
            ax.legend(fontsize=8)
    fig.suptitle(f"Rewards of {labels[0]} and {labels[1]} responses")
    return save(fig, path)


def attribute_plot(result: dict, outputs: np.ndarray, scores: np.ndarray, path: str | Path, seed: int = 0) -> Path:
    """Per attribute (`result["attributes"]`, in order), each scored response's output against its score
    (`outputs`, `scores`: [responses, A], NaN where missing), the scores jittered a little so that the many
    responses of one rating do not hide each other, with the identity line for reference."""
    names = list(result["attributes"])
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = new_figure(4.2 * cols, 3.8 * rows, rows, cols)
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
            ax.legend(fontsize=8, loc="upper left")
        m = result["attributes"][name]["overall"]
        rho = "n/a" if m["spearman"] is None or np.isnan(m["spearman"]) else f"{m['spearman']:.3f}"
        ax.set_title(f"{name} (n={m['n']}, Spearman {rho})", fontsize=10)
        ax.set_xlabel("score in the data")
        ax.set_ylabel("model output")
    fig.suptitle("Attribute outputs against the records' scores")
    return save(fig, path)


def length_plot(result: dict, lengths: tuple[np.ndarray, ...], path: str | Path, seed: int = 0) -> Path:
    """Three views of length bias: per-subset rates, accuracy by length difference, reward vs length.

    `lengths` is (chosen rewards, rejected rewards, chosen lengths, rejected lengths) over all pairs.
    """
    chosen, rejected, len_c, len_r = lengths
    fig, ((bars, by_diff, scatter),) = new_figure(16, 4.8, 1, 3, width_ratios=[1.2, 1.1, 1])
    groups = _groups(result)
    x = np.arange(len(groups))
    series = [
        ("longer_chosen_rate", 'baseline: "longer wins"', BASELINE),
        ("accuracy", "RM accuracy", RM),
        ("accuracy_chosen_longer", "RM acc., chosen longer", "tab:green"),
        ("accuracy_chosen_shorter", "RM acc., chosen shorter", "tab:red"),
    ]
    w = 0.8 / len(series)
    for k, (key, label, color) in enumerate(series):
        vals = [m[key] for _, m in groups]
        pos = x - 0.4 + w * (k + 0.5)
        bars.bar(pos, vals, width=w, color=color, label=label)
        for p, v in zip(pos, vals, strict=True):
            bars.text(p, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    bars.axhline(0.5, color="black", lw=0.8, ls=":")
    bars.set_xticks(x, [f"{n}\nn={m['n']}" for n, m in groups])
    bars.set_ylim(0, 1.22)
    bars.set_yticks(np.linspace(0, 1, 6))
    bars.set_ylabel("rate")
    bars.set_title("Does length explain the preferences?", fontsize=10)
    bars.legend(fontsize=7.5, ncols=2, loc="upper left")

    diff_bins = result["length_bins"]["overall"]
    labels = [f"{b['lo']:+.0f} to\n{b['hi']:+.0f}\nn={b['n']}" for b in diff_bins]
    pos = np.arange(len(diff_bins))
    by_diff.plot(pos, [b["accuracy"] for b in diff_bins], "o-", color=RM, label="RM accuracy")
    by_diff.plot(pos, [b["longer_chosen_rate"] for b in diff_bins], "D--", color=BASELINE, label='"longer wins"')
    by_diff.axhline(0.5, color="black", lw=0.8, ls=":")
    by_diff.set_xticks(pos, labels, fontsize=8)
    by_diff.set_ylim(-0.03, 1.03)
    by_diff.set_xlabel("len(chosen) - len(rejected), characters (quantile bins)")
    by_diff.set_ylabel("accuracy")
    by_diff.set_title("RM accuracy against the length difference (all pairs)", fontsize=10)
    by_diff.legend(fontsize=8)

    rng = np.random.default_rng(seed)  # a seeded sample keeps large sets readable
    keep = np.sort(rng.permutation(len(chosen))[:2000])
    scatter.scatter(len_c[keep], chosen[keep], s=6, alpha=0.5, color=RM, label="chosen")
    scatter.scatter(len_r[keep], rejected[keep], s=6, alpha=0.5, color=REJECTED, label="rejected")
    if len(len_c) and np.all(np.concatenate([len_c, len_r]) > 0):  # no pairs (every reward non-finite): linear
        scatter.set_xscale("log")
        scatter.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks overlap on short ranges
    rho = result["overall"]["reward_length_spearman"]
    scatter.set_title(f"Reward against response length (Spearman rho = {rho:.2f})", fontsize=10)
    scatter.set_xlabel("response length, characters")
    scatter.set_ylabel("reward")
    scatter.legend(fontsize=8, markerscale=2)
    return save(fig, path)


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
