"""What length alone scores on a leaderboard suite, by the suite's own rules: eval.json's `suite.length_controls`.

A suite's figure means little beside what the length of the answers gives away: always picking the shortest answer
is reported to score 52.7% on RewardBench 2's Focus subset against best-of-4's 25% chance, and always picking the
longer one 100% on RewardBench's alpacaeval-easy (allenai/reward-bench#267, #268). So each figure (the score, every
section, every subset) is recomputed with a "reward" that is minus the response's length in characters
(`shortest`: the shortest answer wins, a length tie shared or counted as the suite's rule counts a reward tie) and
with the length itself (`longest`), by the same suite code (`Suite.block`) and with the same intervals
(rm/suites/suite_intervals.py) as the model's figures.
"""

from __future__ import annotations

import numpy as np

from rm.suites.catalog import Suite
from rm.suites.records import SuiteItem
from rm.suites.suite_intervals import suite_uncertainty

PICKS = {"shortest": -1.0, "longest": 1.0}
"""Each control by name, and the sign that makes a response's length its reward."""


def chars(items: list[SuiteItem]) -> list[np.ndarray]:
    """Each item's responses' lengths in characters (its rendered responses, as the report's length columns)."""
    return [np.array([len(text) for text in item.responses], dtype=np.float64) for item in items]


def figures(block: dict) -> dict:
    """A suite block's figures: the score, the sections and each subset's value (a subset's `accuracy`, `score` or
    `average`, whichever the suite reports), and RewardBench's prior sets where it has them."""
    subsets = {}
    for name, m in (block.get("subsets") or {}).items():
        subsets[name] = next((m[k] for k in ("accuracy", "score", "average") if k in m), None)
    out = {"score": block.get("score"), "sections": block.get("sections") or {}, "subsets": subsets}
    return out | ({"prior_sets": block["prior_sets"]} if block.get("prior_sets") is not None else {})


def length_controls(
    suite: Suite, items: list[SuiteItem], prior: list[SuiteItem], samples: int = 1000, seed: int = 0
) -> dict:
    """{"shortest": {...}, "longest": {...}}: each the suite's figures (`figures`) of always picking the shortest
    (longest) answer, and `ci95`, their intervals shaped as `suite.uncertainty`'s (the same n and chance apply)."""
    out = {}
    for name, sign in PICKS.items():
        rewards = [sign * r for r in chars(items + prior)]
        mine, theirs = rewards[: len(items)], rewards[len(items) :]
        block = suite.block(items, mine, prior, theirs) if prior else suite.block(items, mine)
        ci = suite_uncertainty(suite.name, items + prior, rewards, samples, seed)["ci95"]
        out[name] = figures(block) | {"ci95": ci}
    return out
