"""What a run says on the console: its data in the words of its layout, the end-of-run summary, the resume hint.

A K-response run trains on groups, not pairs: its data line counts groups (and their K), and its summary adds
the group metrics that eval.json holds (top-1, best-of-K, Kendall tau; rm/evaluation/ranking_metrics.py) beside
the pairwise accuracy, which alone would hide how well whole rankings come out. A run with `train.eval_suites`
ends with each suite's last score. Paths are shown as the user could type them: relative to the working
directory when under it (the run's config keeps them absolute, rm/config/rundir.py's `absolute_paths`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from rm.config.rundir import RunDir
from rm.evaluation.attribute_metrics import attribute_lines
from rm.evaluation.report.length_text import length_line
from rm.tokens.prepare import Prepared
from rm.training.loop import Run

RANKING = (("top1_accuracy", "top-1"), ("best_of_k_accuracy", "best-of-K"), ("kendall_tau", "Kendall tau"))
"""eval.json's group metrics, as the summary's columns name them."""


def format_table(result: dict) -> str:
    """Training's console summary of an eval (`evaluate`'s result): accuracy, count and mean margin per subset and
    overall, then each attribute's line and a process reward model's step line; `rm eval` prints its wider table
    (rm/evaluation/report/markdown.py)."""
    rows = [(name, m) for name, m in result["subsets"].items()] + [("overall", result["overall"])]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'subset':<{width}}  accuracy      n  mean margin", "-" * (width + 29)]
    lines += [f"{name:<{width}}  {m['accuracy']:8.4f}  {m['n']:5d}  {m['mean_margin']:11.4f}" for name, m in rows]
    return "\n".join(lines + attribute_lines(result) + step_lines(result))


def step_lines(result: dict) -> list[str]:
    """The `steps` block's overall numbers in one line (rm/evaluation/steps/step_report.py); none without it."""
    if "steps" not in result:
        return []
    m = result["steps"]["overall"]
    f1 = (m["first_error"] or {}).get("f1")
    shown = [("step accuracy", m["step_accuracy"]), ("step AUC", m["step_auc"]), ("first-error F1", f1)]
    return [
        "steps: "
        + ", ".join(f"{name} {'n/a' if v is None else f'{v:.4f}'}" for name, v in shown)
        + f" ({m['n_steps']} steps of {m['n_solutions']} solutions)"
    ]


def group_sizes(data: Prepared, split: str) -> np.ndarray:
    """The number of responses of each encoded group of `split` (2 for a pair)."""
    return pc.list_value_length(getattr(data, split).table.column("response_ids")).to_numpy(zero_copy_only=False)


def has_groups(data: Prepared, split: str) -> bool:
    """Whether `split` holds a group of more than two responses: the group metrics then say more than accuracy."""
    sizes = group_sizes(data, split)
    return bool(len(sizes)) and int(sizes.max()) > 2


def counted(data: Prepared, split: str) -> str:
    """`508 train groups (K=2-5)` for a split with K-response groups, `508 train pairs` for pairs."""
    n = sum(data.kept(split).values())
    name = "train" if split == "train" else "eval"
    if not has_groups(data, split):
        return f"{n} {name} pairs"
    sizes = group_sizes(data, split)
    low, high = int(sizes.min()), int(sizes.max())
    return f"{n} {name} groups (K={low if low == high else f'{low}-{high}'})"


def data_line(data: Prepared) -> str:
    """The run's log line about the data it trains and evaluates on, after encoding dropped what did not fit."""
    return f"data: {counted(data, 'train')} {data.kept('train')}, {counted(data, 'eval')}"


def shown(path: Path | str, given: str = "") -> str:
    """`path` as the user could type it: relative to the working directory when under it, else as `given`
    (the user's own spelling of it, when that names the same place), else absolute."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except (ValueError, OSError):  # not under it, or the working directory is gone
        pass
    if given and Path(os.path.abspath(os.path.expanduser(given))) == path:
        return given
    return str(path)


def resume_hint(config: Path, given_dir: str = "") -> str:
    """The command that resumes a stopped run from its `config` (<output_dir>/config.yaml)."""
    at = shown(config, str(Path(given_dir) / config.name) if given_dir else "")
    return f"continue with: python -m rm train {at} train.resume=auto (or accelerate launch …)"


def _number(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def ranking_table(result: dict) -> list[str]:
    """The group metrics per subset and overall, with the groups they are over."""
    rows = [*result["subsets"].items(), ("overall", result["overall"])]
    width = max(len(name) for name, _ in rows)
    head = f"{'subset':<{width}}  " + "  ".join(f"{label:>11}" for _, label in RANKING) + "  groups"
    lines = [head, "-" * len(head)]
    for name, m in rows:
        cells = "  ".join(f"{_number(m.get(key)):>11}" for key, _ in RANKING)
        lines.append(f"{name:<{width}}  {cells}  {m.get('groups', ''):>6}")
    return lines


def suite_lines(result: dict) -> list[str]:
    """Each leaderboard suite's last score and its sections (a section of several numbers by its average)."""
    lines = []
    for name, block in result.get("suites", {}).items():
        parts = []
        for section, value in block["sections"].items():
            value = value.get("average") if isinstance(value, dict) else value
            parts.append(f"{section} {_number(value)}")
        lines.append(f"suite {name} (step {block['step']}): score {_number(block['score'])}; " + ", ".join(parts))
    return lines


def summary(result: dict, step: int, seconds: float, root: str, groups: bool) -> str:
    """The end-of-run summary: accuracy per subset and the length line (rm/evaluation/report/length_text.py); for a
    K-response eval set (`groups`) its group metrics; each suite's score; where the run directory is."""
    lines = [f"\nheld-out accuracy after {step} steps ({seconds} s):", format_table(result)]
    length = length_line(result, groups)  # what length alone scores, beside the model (in tokens: a run keeps no text)
    lines += [length] if length else []
    if groups:
        lines += ["", "held-out rankings of the eval groups:", *ranking_table(result)]
    if result.get("suites"):
        lines += ["", *suite_lines(result)]
    return "\n".join([*lines, f"run directory: {root}"])


def stopped(run: Run, info: dict, given_dir: str = "") -> dict:
    """After SIGTERM or Ctrl-C: the checkpoint is saved; a final eval and export could outlast the grace period."""
    if run.accelerator.is_main_process:
        folder = RunDir(run.cfg.output_dir)
        saved = any(step == run.state.step for step, _ in folder.marked_checkpoints())  # none of non-finite weights
        said = "checkpoint saved" if saved else "no checkpoint of it: its weights are not finite"
        print(f"\nstopped by {run.stopped_by} after step {run.state.step} ({info['seconds']} s); {said}.")
        print(resume_hint(folder.config, given_dir))
    return {"interrupted": True, "stopped_by": run.stopped_by, "train": info}
