"""What every figure of the eval report shares: its size and resolution, and one row per subset.

The figures are read in report.html at their own pixel size (at most `MAX_WIDTH_IN` x `DPI`, narrower than the page's
`PAGE_WIDTH_PX` at a 1280 px window), so a font of `MIN_FONT_PT` points is `MIN_FONT_PT * DPI / 72` pixels on screen
(12 px), never shrunk. Per-subset figures put one subset per row (a dot and its interval, a forest plot), so 30
subsets make a taller figure, never a crowded one, and rows come grouped by section (`rows_of`), as the tables do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rm.evaluation.report.markdown import subset_sections

RM, REJECTED, BASELINE = "tab:blue", "tab:orange", "0.55"
DPI = 110
MIN_FONT_PT = 8
"""The smallest font any figure uses: 12 px at `DPI`, shown at its own size."""
MAX_WIDTH_IN = 10.0
PAGE_WIDTH_PX = 1180
"""The width report.html gives a figure at a 1280 px window (the page's width less its margins): a figure up to
this wide is shown at its own size."""
ROW_IN = 0.3
"""Height of one subset's row: 33 px, over twice a tick label's height."""


def new_figure(width: float, height: float, rows: int = 1, cols: int = 1, **kw):
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def save(fig: Figure, path: str | Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return Path(path)


Row = tuple[str, str]
"""("section", its name), ("subset", its name) or ("overall", "overall")."""


def rows_of(result: dict, overall: bool = True) -> list[Row]:
    """The figure's rows, top to bottom: each section's name then its subsets (a plain eval: the subsets alone),
    then "overall" where there is more than one subset."""
    rows: list[Row] = []
    last = None
    for name, section in subset_sections(result).items():
        if section is not None and section != last and section != name:  # RewardBench 2: a subset is a section
            rows.append(("section", section))
        last = section
        rows.append(("subset", name))
    if overall and len(result["subsets"]) != 1:
        rows.append(("overall", "overall"))
    return rows


def row_axis(ax: Axes, rows: list[Row], labels: dict[str, str] | None = None) -> np.ndarray:
    """Lay `rows` out top to bottom on `ax`'s y axis (section names in bold); returns each row's y."""
    y = -np.arange(len(rows), dtype=float)
    text = [(labels or {}).get(name, name) if kind != "section" else name for kind, name in rows]
    ax.set_yticks(y, text)
    for label, (kind, _) in zip(ax.get_yticklabels(), rows, strict=True):
        if kind != "subset":
            label.set_fontweight("bold")
    ax.set_ylim(y[-1] - 0.6, 0.6)
    ax.tick_params(axis="y", length=0)
    return y


def value_axis(ax: Axes, y: np.ndarray, labels: list[str]) -> Axes:
    """A right-hand y axis that writes each row's numbers beside it (a row's label there, not over the plot)."""
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(y, labels)
    right.tick_params(axis="y", length=0)
    return right


def interval(ax: Axes, y: np.ndarray, values: np.ndarray, ci: np.ndarray, color: str, label: str, **kw) -> None:
    """Dots at `values` with horizontal 95% interval bars (`ci`: [rows, 2]); NaN rows are left empty."""
    v = np.asarray(values, dtype=float)
    c = np.asarray(ci, dtype=float).reshape(-1, 2)
    ok = np.isfinite(v)
    lo, hi = np.where(np.isfinite(c[:, 0]), c[:, 0], v), np.where(np.isfinite(c[:, 1]), c[:, 1], v)
    ax.errorbar(v[ok], y[ok], xerr=[v[ok] - lo[ok], hi[ok] - v[ok]], fmt="o", color=color, ecolor=color, ms=5,
                capsize=3, label=label, **kw)  # fmt: skip


def ci_of(m: dict, key: str) -> list[float]:
    """eval.json's [lo, hi] under `key` (null or missing: NaN)."""
    pair = m.get(key) or [None, None]
    return [np.nan if x is None else float(x) for x in pair]


def num(x) -> float:
    return np.nan if x is None else float(x)


def fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"
