"""eval.json's `steps` block: how a process reward model judges each step of its held-out solutions.

Per subset and overall, from the gathered step outputs (rm/evaluation/steps/step_gather.py):
- `step_accuracy`, `step_auc`: each step's probability against its label (>= 0.5 correct), steps pooled;
- `first_error`: ProcessBench's metric on the solutions (rm/evaluation/steps/processbench.py): a solution's label is
  its first step labelled wrong (-1: none), the model's the first step it judges wrong; the accuracies on
  erroneous and on correct solutions and their harmonic mean `f1`;
- `best_of_n`: per aggregation of a solution's step probabilities (min, product, last), how often the solution it
  ranks first among a problem's is correct (every step labelled correct), with the oracle and chance rates, over
  the problems with two or more solutions.
"""

from __future__ import annotations

import torch

from rm.data.steps.step_records import CORRECT_AT
from rm.evaluation.steps.best_of_n import AGGREGATES, Candidate, best_of_n
from rm.evaluation.steps.processbench import ProcessBenchItem, processbench_scores
from rm.evaluation.steps.step_metrics import step_scores


def solutions(gathered: dict[str, torch.Tensor]) -> dict[int, list[tuple[list[float], list[float]]]]:
    """Per group row: its solutions in slot order, each (step probabilities, step labels)."""
    out: dict[int, dict[int, tuple[list[float], list[float]]]] = {}
    probs = torch.sigmoid(gathered["step_output"]).tolist()
    for g, s, p, y in zip(gathered["step_group"].tolist(), gathered["step_slot"].tolist(), probs,
                          gathered["step_target"].tolist(), strict=True):  # fmt: skip
        solution = out.setdefault(g, {}).setdefault(s, ([], []))
        solution[0].append(p)
        solution[1].append(y)
    return {g: [by_slot[s] for s in sorted(by_slot)] for g, by_slot in out.items()}


def first_wrong(labels: list[float]) -> int:
    return next((i for i, y in enumerate(labels) if y < CORRECT_AT), -1)


def metrics(problems: list[list[tuple[list[float], list[float]]]]) -> dict:
    """The block's numbers for these problems."""
    flat = [solution for problem in problems for solution in problem]
    block = step_scores([p for p, _ in flat], [y for _, y in flat])
    items = [ProcessBenchItem("all", first_wrong(y), p) for p, y in flat]
    block["first_error"] = processbench_scores(items)["splits"].get("all")
    several = [[Candidate(p, first_wrong(y) == -1) for p, y in problem] for problem in problems if len(problem) > 1]
    block["best_of_n"] = {how: best_of_n(several, how) for how in AGGREGATES}
    block["n_solutions"] = len(flat)
    return block


def step_block(gathered: dict[str, torch.Tensor], subsets: list[str]) -> dict:
    """{"steps": {"overall": ..., "subsets": {name: ...}}} from `gather_rewards`' columns."""
    per_group = solutions(gathered)
    subset_of = gathered["subset"].tolist()
    by_subset: dict[str, list] = {}
    for g, problem in sorted(per_group.items()):
        by_subset.setdefault(subsets[subset_of[g]], []).append(problem)
    everything = [p for problems in by_subset.values() for p in problems]
    return {"steps": {"overall": metrics(everything), "subsets": {n: metrics(p) for n, p in by_subset.items()}}}
