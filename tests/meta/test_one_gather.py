"""One gather of scored values: rm/evaluation/gather.py's `gather_once` (training's eval, `rm eval`, the suites),
after one dealer, rm/collate/shard.py's `deal_rounds`. Two copies had drifted apart (an owner table beside copy
tags): under 3 processes the eval's kept a filler's reward of a pair, computed in another batch than its own."""

import re
from pathlib import Path

RM = Path(__file__).resolve().parents[2] / "rm"


def modules_matching(pattern: str) -> list[str]:
    return sorted(str(p.relative_to(RM)) for p in RM.rglob("*.py") if re.search(pattern, p.read_text()))


def test_scored_values_are_gathered_in_one_module():
    """training/faults.py gathers each process's fault flags (three integers), not scores."""
    assert modules_matching(r"\.gather\(\s*accelerator\.pad|pad_across_processes") == ["evaluation/gather.py"]
    assert modules_matching(r"accelerator\.gather\(") == ["evaluation/gather.py", "training/faults.py"]


def test_scoring_plans_are_dealt_by_one_function():
    assert modules_matching(r"\bdef deal_rounds\(") == ["collate/shard.py"]
    assert modules_matching(r"\bdeal_rounds\(") == ["collate/shard.py", "suites/score_items.py"]
