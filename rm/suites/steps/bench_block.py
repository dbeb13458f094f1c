"""ProcessBench's numbers for a model's step probabilities: eval.json's `suite` block and the tables that print it.

The metric is rm/evaluation/steps/processbench.py's, the paper's: an item's prediction is its first step with
P(correct) below the threshold (0.5), -1 if none; per split, the accuracy on the erroneous items (prediction = the
labelled earliest error) and on the correct ones (prediction -1), `f1` their harmonic mean; `score` the mean of the
four splits' F1. Beside it, named apart (`detection_*`, `error_detection`), the precision/recall F1 of flagging a
solution as erroneous at all, which some tools print as "ProcessBench F1": it credits a flag at the wrong step,
so it runs higher and is not comparable with the paper's tables.

Two kinds of item cannot be judged as the model would judge them whole, and are counted, never silently:

- **cut**: its steps past `max_length` were not scored. Its prediction is unknown whenever no scored step is
  flagged (the cut steps might be). Such items are left out of every number, all of them whatever the scored
  steps say, so that which items are left out depends on the lengths alone: two models with one tokenizer and
  one max_length are judged on the same items. `left_out_cut` counts them per split; a note says so.
- **non-finite**: a step's output overflowed. The item is counted wrong (as the other suites count a non-finite
  reward): a correct solution as flagged at its first step, an erroneous one as flagged nowhere.

Splits the paper does not have (a file named otherwise) are scored apart, `in_score: false`, and left out of the
score, as the other suites treat a subset their leaderboard lacks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rm.evaluation.steps.processbench import ProcessBenchItem, error_detection_prf, first_error, processbench_scores
from rm.evaluation.steps.step_metrics import CORRECT_AT
from rm.suites.steps.bench_records import NAME, SPLITS, BenchItem
from rm.suites.subset_names import unknown_note

METRIC = (
    "ProcessBench F1 (Zheng et al. 2024): per split the harmonic mean of the accuracy on erroneous solutions (the "
    "first step with P(correct) < threshold is the labelled earliest error) and on correct ones (no step flagged); "
    "score: the unweighted mean of the four splits' F1"
)
DETECTION = (
    "NOT the paper's F1: precision and recall of flagging a solution as erroneous at all (any step below the "
    "threshold) against its having an error, whichever step is flagged"
)
NO_NUMBERS = {"erroneous_acc": None, "correct_acc": None, "f1": None, "n_erroneous": 0, "n_correct": 0}
"""A split none of whose items could be judged (every one cut)."""


def wrong_probs(label: int, steps: int) -> tuple[float, ...]:
    """Step probabilities whose prediction misses `label` by both metrics: a correct solution (-1) flagged at its
    first step, an erroneous one flagged nowhere."""
    return (0.0,) + (1.0,) * (steps - 1) if label == -1 else (1.0,) * steps


def metric_item(item: BenchItem, probs: Sequence[float | None], cut: int) -> ProcessBenchItem | None:
    """The item as the metric reads it; None for a cut item (left out). A non-finite step output (None among the
    scored steps) makes it wrong (`wrong_probs`)."""
    if cut:
        return None
    if any(p is None for p in probs):
        return ProcessBenchItem(item.split, item.label, wrong_probs(item.label, len(item.steps)))
    return ProcessBenchItem(item.split, item.label, [float(p) for p in probs])


def prediction(probs: Sequence[float | None], cut: int, threshold: float = CORRECT_AT) -> int | None:
    """The item's predicted earliest error (-1: none); None where it is not judged (cut, or a non-finite output)."""
    if cut or any(p is None for p in probs):
        return None
    return first_error([float(p) for p in probs], threshold)


def bench_block(
    items: Sequence[BenchItem],
    probs: Sequence[Sequence[float | None]],
    cut: Sequence[int],
    threshold: float = CORRECT_AT,
) -> dict:
    """eval.json's `suite`: `score` (the paper's average F1), `sections` (each paper split's F1, what training
    logs), `splits` (every split's accuracies, F1, detection numbers and counts), `error_detection` (pooled over
    the paper's splits) and the notes. `probs`: per item, per step, P(correct), None where not scored or not
    finite; `cut`: per item, its steps past max_length."""
    judged = [metric_item(i, p, c) for i, p, c in zip(items, probs, cut, strict=True)]
    read = list(dict.fromkeys(i.split for i in items))
    known, other = [s for s in SPLITS if s in read], [s for s in read if s not in SPLITS]
    scored = [j for j in judged if j is not None]
    paper = processbench_scores([j for j in scored if j.split in SPLITS], threshold)
    apart = processbench_scores([j for j in scored if j.split not in SPLITS], threshold)
    nonfinite = [i.split for i, p, c in zip(items, probs, cut, strict=True) if not c and None in p]
    left_out = Counter(i.split for i, c in zip(items, cut, strict=True) if c)
    loaded = Counter(i.split for i in items)
    splits = {}
    for name in known + other:
        numbers = (paper if name in SPLITS else apart)["splits"].get(name, NO_NUMBERS)
        splits[name] = {
            "items": loaded[name],
            "scored": loaded[name] - left_out[name],
            "left_out_cut": left_out[name],
            "nonfinite_wrong": nonfinite.count(name),
            **numbers,
            **error_detection_prf([j for j in scored if j.split == name], threshold),
            "in_score": name in SPLITS,
        }
    complete = all(s in paper["splits"] for s in known)
    score = paper["average_f1"] if known and complete else None
    return {
        "name": NAME,
        "score": score,
        "metric": METRIC,
        "threshold": threshold,
        "sections": {s: splits[s]["f1"] for s in known},
        "splits": splits,
        "error_detection": error_detection_prf([j for j in scored if j.split in SPLITS], threshold)
        | {"note": DETECTION},
        "items": len(items),
        "left_out_cut": sum(left_out.values()),
        "nonfinite_wrong": len(nonfinite),
        "notes": data_notes(items, cut) + score_notes(len(nonfinite), splits, score),
    }


def data_notes(items: Sequence[BenchItem], cut: Sequence[int]) -> list[str]:
    """How the data differs from the paper's, known before any score: splits missing or extra, items left out
    for their length."""
    loaded = Counter(i.split for i in items)
    out = []
    if missing := [s for s in SPLITS if s not in loaded]:
        out.append(f"split(s) {', '.join(missing)} of ProcessBench not read: the score averages the "
                   f"{len(SPLITS) - len(missing)} read, where the paper averages all four")  # fmt: skip
    out += unknown_note("split", "ProcessBench", Counter({s: n for s, n in loaded.items() if s not in SPLITS}), SPLITS)
    left_out = Counter(i.split for i, c in zip(items, cut, strict=True) if c)
    if left_out:
        per = ", ".join(f"{s} {n}" for s, n in left_out.items())
        out.append(f"{sum(left_out.values())} item(s) with steps past max_length ({per}) are left out of every "
                   "number: a step not scored cannot be judged; raise --max-length to score them")  # fmt: skip
    return out


def score_notes(nonfinite: int, splits: dict, score: float | None) -> list[str]:
    """What the scores themselves leave out: items counted wrong, a score the paper's rule cannot give."""
    out = []
    if nonfinite:
        out.append(f"{nonfinite} item(s) have a step output that is not finite (NaN or infinite): counted as wrong")
    known = [s for s in SPLITS if s in splits]
    if known and score is None:
        undefined = [s for s in known if splits[s]["f1"] is None]
        out.append(f"score is null: split(s) {', '.join(undefined)} have no F1 (no judged erroneous or no judged "
                   "correct item), and the paper's mean needs every split's")  # fmt: skip
    return out


COLUMNS = ("split", "items", "left out (cut)", "erroneous", "erroneous acc", "correct", "correct acc", "F1",
           "detection P", "detection R", "detection F1")  # fmt: skip


def table_rows(block: dict) -> list[list[str]]:
    """One row per split (a split outside the score marked so), then the detection numbers pooled."""
    rows = []
    for name, m in block["splits"].items():
        rows.append([name if m["in_score"] else f"{name} (not in score)", str(m["items"]), str(m["left_out_cut"]),
                     str(m["n_erroneous"]), _num(m["erroneous_acc"]), str(m["n_correct"]), _num(m["correct_acc"]),
                     _num(m["f1"]), _num(m["detection_precision"]), _num(m["detection_recall"]),
                     _num(m["detection_f1"])])  # fmt: skip
    pooled = block["error_detection"]
    rows.append(["all (detection only)", str(block["items"]), str(block["left_out_cut"]), "", "", "", "", "",
                 _num(pooled["detection_precision"]), _num(pooled["detection_recall"]),
                 _num(pooled["detection_f1"])])  # fmt: skip
    return rows


def headline(block: dict) -> str:
    return (f"{block['name']}: ProcessBench F1 {_num(block['score'])} (the paper's: mean over splits of the harmonic "
            f"mean of erroneous and correct accuracy, threshold {block['threshold']}); detection F1 "
            f"{_num(block['error_detection']['detection_f1'])} (flagging any step: not the paper's F1)")  # fmt: skip


def bench_table(block: dict) -> str:
    """The console table: the headline, then a line per split."""
    rows = [list(COLUMNS), *table_rows(block)]
    widths = [max(len(r[k]) for r in rows) for k in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) if k else c.ljust(w) for k, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]  # fmt: skip
    return "\n".join([headline(block), lines[0], "-" * len(lines[0]), *lines[1:]])


def bench_markdown(block: dict) -> str:
    """report.md's section: the headline, the table, the metric's definition and the notes."""
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    table += ["| " + " | ".join(r) + " |" for r in table_rows(block)]
    notes = [f"- {n}" for n in block["notes"]]
    parts = [f"## ProcessBench\n\n**{headline(block)}**", "\n".join(table), f"`score`: {block['metric']}.",
             f"`detection_*`: {DETECTION}."]  # fmt: skip
    return "\n\n".join(parts + (["Notes:\n\n" + "\n".join(notes)] if notes else [])) + "\n"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
