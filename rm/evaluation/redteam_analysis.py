"""Red-team analysis: does the reward tell the more harmful red-team transcripts from the less harmful?

Anthropic's red-team-attempts (Ganguli et al., 2022) are whole conversations, each annotated with
`min_harmlessness_score_transcript` (a preference model's harmlessness of the assistant's worst turn:
lower is more harmful) and `rating` (the red-teamer's 0-4 rating of their own success: higher is more
harmful), for assistants of several `model_type`s and sizes (`num_params`). The card says they are not
preference pairs, so they are *scored*: a harmlessness reward model should have a positive Spearman
correlation with the first and a negative one with the second, overall and within each group.

`python -m rm redteam --model M --input red_team_attempts.jsonl.gz --out DIR` scores the transcripts
(DIR/scores.jsonl, by `rm.evaluation.score_file`) and writes DIR/redteam.json and DIR/redteam.png; `--scores FILE`
reuses a scored file.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from rm.data.data_report import DataReport
from rm.data.sources import read_file
from rm.errors import DataError
from rm.evaluation.metrics import json_safe, spearman
from rm.evaluation.report import plots
from rm.evaluation.score_file import score_file

TARGETS = ("min_harmlessness_score_transcript", "rating")
GROUPS = ("model_type", "num_params")
UNITS = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _number(record: dict, name: str, origin: str, required: bool) -> float | None:
    value = record.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        got = "missing" if name not in record else repr(value)
        raise DataError(f"{origin}: field {name!r} must be a number, got {got}")
    return float(value)


def load_scored(path: str | Path) -> list[dict]:
    """Rows {reward, targets..., groups...} from a scored red-team file (`rm score` output).

    A missing or null target leaves that row out of that target's correlations only (its `n` shows it);
    a value of the wrong type stops with the file, line and field.
    """
    rows = []
    for origin, record in read_file(Path(path), DataReport("error", repair_always=True)):
        if not isinstance(record, dict):
            raise DataError(f"{origin}: expected a JSON object")
        row = {"reward": _number(record, "reward", origin, required=True)}
        row |= {t: _number(record, t, origin, required=False) for t in TARGETS}
        row |= {g: "unknown" if record.get(g) is None else str(record[g]) for g in GROUPS}
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no scored records")
    return rows


def correlations(rows: list[dict]) -> dict:
    """{target: {"spearman": rho, "n": pairs with a value}} for the given rows."""
    out = {}
    for target in TARGETS:
        have = [r for r in rows if r[target] is not None]
        rho = spearman([r["reward"] for r in have], [r[target] for r in have]) if have else float("nan")
        out[target] = {"spearman": rho, "n": len(have)}
    return out


def _size(label: str) -> float:
    """ "52B" -> 5.2e10, "810M" -> 8.1e8, so sizes sort by size; anything else sorts last."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMBT]?)\s*", label, flags=re.IGNORECASE)
    return float(m.group(1)) * UNITS[m.group(2).upper()] if m else math.inf


def analyze(rows: list[dict]) -> dict:
    """Correlations overall and within each model_type and each num_params value."""
    result: dict = {"overall": correlations(rows) | {"records": len(rows)}}
    for group in GROUPS:
        values = sorted({r[group] for r in rows}, key=(_size if group == "num_params" else str))
        result[group] = {}
        for v in values:
            sub = [r for r in rows if r[group] == v]
            result[group][v] = correlations(sub) | {"records": len(sub)}
    return result


def format_table(result: dict) -> str:
    lines = [f"{'group':<36} {'records':>7}  {'rho(harmlessness)':>17}  {'rho(rating)':>11}", "-" * 77]
    rows = [("all", result["overall"])] + [(f"{g}={v}", m) for g in GROUPS for v, m in result[g].items()]
    for name, m in rows:
        h, r = (m[t]["spearman"] for t in TARGETS)
        lines.append(f"{name:<36} {m['records']:7d}  {h:17.4f}  {r:11.4f}")
    return "\n".join(lines)


def run_redteam(out: str | Path, *, scores: str = "", model=None, tokenizer=None, input: str = "", **score_kw) -> dict:
    """Score `input` with `model` into out/scores.jsonl (unless `scores` names a scored file), then analyze;
    writes out/redteam.json and out/redteam.png and returns the result (with `scored` counts when it scored).

    `score_kw` goes to `rm.evaluation.score_file.score_file` (batch_size, max_length, field).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    counts = None
    if not scores:
        scores = str(out / "scores.jsonl")
        counts = score_file(model, tokenizer, input, scores, **score_kw)
    rows = load_scored(scores)
    result = analyze(rows)
    result["scores"] = str(scores)
    (out / "redteam.json").write_text(json.dumps(json_safe(result), indent=2) + "\n")
    reward = np.array([r["reward"] for r in rows])
    targets = {t: np.array([np.nan if r[t] is None else r[t] for r in rows]) for t in TARGETS}
    plots.redteam_plot(result, reward, targets, out / "redteam.png")
    if counts is not None:
        result["scored"] = counts
    return result
