"""`train.eval_suites`: leaderboard suites a run evaluates at each eval (rm/suites, rm/training/suite_evals.py)."""

from __future__ import annotations

from dataclasses import dataclass

from rm.errors import ConfigError

SUITE_NAMES = ("rewardbench", "rewardbench2", "rm-bench", "processbench")
"""The suites of rm/suites/catalog.py (`SUITE_NAMES` there; tests/suites keeps the two lists equal)."""


@dataclass
class SuiteConfig:
    """One suite, e.g. `{suite: rewardbench2, data: allenai/reward-bench-2}`."""

    suite: str = "rewardbench"
    """rewardbench, rewardbench2, rm-bench or processbench (a PRM's step scores, read at data.step_separator)."""
    data: str = ""
    """A file, a downloaded dataset folder or a Hub name in the suite's published layout; empty: its Hub dataset."""
    split: str = ""
    """The split to read; empty: the one its leaderboard scores (processbench: all four)."""

    def __post_init__(self) -> None:
        if self.suite not in SUITE_NAMES:
            raise ConfigError(f"train.eval_suites: unknown suite {self.suite!r} (rm knows {', '.join(SUITE_NAMES)})")
