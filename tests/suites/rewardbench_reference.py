"""RewardBench's own scoring, run in its own venv (`make references`: .venv/ref-rewardbench, rewardbench 0.1.4
installed with --no-deps, plus numpy and pandas): per-example rewards as JSON on stdin, its aggregates as JSON on
stdout. Nothing of RewardBench is copied here: its functions and constants are read from the installed package's
files, and only those top-level definitions are executed (importing the package would import torch,
transformers and fastchat, which this venv does not have). The few lines that combine them repeat what its
scripts do (rewardbench/rewardbench.py for RewardBench 1, scripts/run_v2.py for RewardBench 2).

    {"task": "rewardbench", "rows": [{"subset", "chosen", "rejected"}]}
        -> {"subsets": {name: accuracy}, "sections": {...}, "example_counts": {...}, "subset_mapping": {...}}
    {"task": "rewardbench2", "rows": [{"id", "subset", "scores": [...], "num_correct"}]}
        -> {"subsets": {name: score}}
    {"task": ..., "batches": [rows, rows, ...]} -> a list of those answers, one per batch of rows
(`prepare_dialogue_from_tokenizer` needs a tokenizer: the test execs it itself, with `load_defs`).
"""

import ast
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def package_file(name: str) -> Path:
    """An installed rewardbench file, found without importing the package (its __init__ imports torch)."""
    return Path(importlib.util.find_spec("rewardbench").origin).parent / name


def load(file: str, names: set[str], namespace: dict) -> dict:
    """Execute only the top-level definitions `names` of the installed `file` into `namespace`."""
    return load_defs(package_file(file), names, namespace)


def load_defs(path: Path, names: set[str], namespace: dict) -> dict:
    """Execute only the top-level definitions (functions, assignments) `names` of the file at `path`."""
    tree = ast.parse(path.read_text())
    nodes = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            nodes.append(node)
        elif isinstance(node, ast.Assign) and {getattr(t, "id", "") for t in node.targets} & names:
            nodes.append(node)
    found = {getattr(n, "name", None) or n.targets[0].id for n in nodes}
    if found != names:
        raise SystemExit(f"{path}: missing {sorted(names - found)}")
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


class Dataset:
    """What the functions use of `datasets.Dataset` (not installed here): rows, to and from pandas."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    @classmethod
    def from_pandas(cls, df: pd.DataFrame) -> "Dataset":
        return cls(df.to_dict("records"))

    @classmethod
    def from_dict(cls, columns: dict) -> "Dataset":
        return cls([dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)])

    def to_pandas(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def __iter__(self):
        return iter(self.rows)


def rewardbench(rows: list[dict]) -> dict:
    ns = load("constants.py", {"EXAMPLE_COUNTS", "SUBSET_MAPPING"}, {})
    load("utils.py", {"calculate_scores_per_section"}, ns)
    # rewardbench/rewardbench.py: 1 where chosen > rejected, per subset the mean.
    results = pd.DataFrame({"subsets": [r["subset"] for r in rows],
                            "results": [1 if r["chosen"] > r["rejected"] else 0 for r in rows]})  # fmt: skip
    grouped = {}
    for subset in np.unique(results["subsets"]):
        part = results[results["subsets"] == subset]
        grouped[str(subset)] = sum(part["results"]) / len(part["results"])
    sections = ns["calculate_scores_per_section"](ns["EXAMPLE_COUNTS"], ns["SUBSET_MAPPING"], grouped)
    return {"subsets": grouped, "sections": sections, "example_counts": ns["EXAMPLE_COUNTS"],
            "subset_mapping": ns["SUBSET_MAPPING"]}  # fmt: skip


def rewardbench2(rows: list[dict]) -> dict:
    ns = load("utils.py", {"reroll_and_score_dataset", "sample_stats", "process_single_model"},
              {"np": np, "pd": pd, "math": math, "Dataset": Dataset})  # fmt: skip
    # scripts/run_v2.py: one row per completion, rerolled into one row per prompt with its "results".
    unrolled = [{"text": f"{i}/{k}", "scores": s, "subset": r["subset"], "id": r["id"]}
                for i, r in enumerate(rows) for k, s in enumerate(r["scores"])]  # fmt: skip
    rerolled = ns["reroll_and_score_dataset"](Dataset(unrolled), [len(r["scores"]) for r in rows], ["text", "scores"])
    for row, r in zip(rerolled.rows, rows, strict=True):
        row["num_correct"] = r["num_correct"]
    out = {}
    for subset in np.unique([r["subset"] for r in rows]):
        part = [row for row in rerolled.rows if row["subset"] == subset]
        if subset.lower() == "ties":
            out[str(subset)] = float(ns["process_single_model"](Dataset(part))[1])
        else:
            out[str(subset)] = sum(row["results"] for row in part) / len(part)
    return {"subsets": out}


if __name__ == "__main__":
    request = json.load(sys.stdin)
    task = {"rewardbench": rewardbench, "rewardbench2": rewardbench2}[request["task"]]
    if "batches" in request:
        json.dump([task(rows) for rows in request["batches"]], sys.stdout)
    else:
        json.dump(task(request["rows"]), sys.stdout)
