"""Several reward models scored as one: per response, each member's reward, their mean, their spread and the
conservative reward, with the one of them a client receives as `rewards` (`rm serve --ensemble`, `rm score --model A
B C`).

Per response, over the members' rewards r_1..r_M (raw; with `--normalize` each member's own export normalisation,
(r_m - mean_m) / std_m, first, since members trained apart need not share a scale):

- mean = (1/M) sum_m r_m: the ensemble's estimate of the reward, and the default `rewards` (`--ensemble-reward
  mean`): it needs no setting, and it is what `rm eval --model A B C` reports as the ensemble;
- std = sqrt((1/M) sum_m (r_m - mean)^2), ddof 0: how much these members disagree;
- conservative = mean - k std (`--uncertainty-k`, default 1): the uncertainty-penalised reward (Eisenstein et al.
  2023, "Helping or Herding?"; Coste et al. 2023's uncertainty-weighted objective subtracts the variance), which an
  RL loop can optimise in place of the mean where a policy finds what the members disagree on (`--ensemble-reward
  conservative`); k is in reward units, so it wants choosing per ensemble, hence not the default;
- min = min_m r_m: Coste et al.'s worst-case objective (`--ensemble-reward min`).

The numbers are rm/evaluation/ensemble/ensemble_numbers.py's `combine` (one home for them: `rm eval` reports the same
mean, std and conservative reward); a response that any member scores non-finite has all of them null. Attribute
outputs (members with the same `model.head.attributes`, which rm/scoring/members.py checks) are the mean over members
of each attribute's raw output. Where the members come from and how they run is rm/scoring/ensemble_model.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rm.errors import ConfigError, RecordError
from rm.evaluation.ensemble.ensemble_numbers import combine
from rm.evaluation.record_texts import GROUP_KEY, output_fields
from rm.scoring.step_inputs import asks_for_steps

REWARDS = ("mean", "conservative", "min")
"""What `rewards` carries (`--ensemble-reward`): the members' mean, mean - k std, or their lowest reward."""

MemberOutputs = Sequence[float] | Sequence[Sequence[float]]
"""One response's raw outputs, one entry per member in order: its reward, or [reward, *attributes]."""


@dataclass(frozen=True)
class Combined:
    """One response as the ensemble scores it; None wherever a value is not finite (JSON null)."""

    reward: float | None
    """The chosen one (`EnsembleRule.reward`): what `rewards` carries."""
    mean: float | None
    std: float | None
    conservative: float | None
    members: list[float | None]
    """Each member's reward (normalised with `--normalize`), in the members' order."""
    attributes: dict[str, float | None] | None = None
    """The mean over members of each attribute output; None for one-output members."""


@dataclass(frozen=True)
class EnsembleRule:
    """How the members' outputs become one answer: which reward is chosen, k, and each member's normalisation."""

    names: tuple[str, ...]
    k: float = 1.0
    reward: str = "mean"
    norms: tuple[dict[str, float], ...] | None = None
    """Each member's {"mean", "std"} (`--normalize`), applied to its reward before anything is combined; None: raw."""
    attributes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise ConfigError(f"--ensemble-reward must be one of {', '.join(REWARDS)}, got {self.reward!r}")
        if not (math.isfinite(self.k) and self.k >= 0):
            raise ConfigError(f"--uncertainty-k must be a finite number >= 0, got {self.k}")

    @property
    def over(self) -> str:
        """What the statistics are taken over, in /info's and the docs' words."""
        if self.norms is None:
            return "the members' raw rewards"
        return "the members' normalised rewards, (reward - mean) / std with each member's own export normalisation"

    def describe(self) -> dict[str, Any]:
        """The ensemble as /info shows it."""
        return {"members": list(self.names), "reward": self.reward, "uncertainty_k": self.k, "over": self.over,
                "normalize": list(self.norms) if self.norms is not None else None}  # fmt: skip

    def combine(self, outputs: Sequence[MemberOutputs]) -> list[Combined]:
        """Each response's `Combined`, from its members' raw outputs (one `MemberOutputs` per response)."""
        if not len(outputs):
            return []
        values = np.asarray(outputs, dtype=np.float64)  # [n, M] or [n, M, 1 + A]
        rewards = values if values.ndim == 2 else values[..., 0]  # [n, M]
        if self.norms is not None:
            rewards = (rewards - [n["mean"] for n in self.norms]) / np.array([n["std"] for n in self.norms])
        with np.errstate(invalid="ignore", over="ignore"):  # a member's inf: null, not a warning
            mean, std, conservative = combine(rewards.T, self.k)  # over axis 0, the members: [n] each
            lowest = np.where(np.isfinite(rewards).all(axis=1), rewards.min(axis=1), np.nan)  # any member's overflow
            chosen = {"mean": mean, "conservative": conservative, "min": lowest}[self.reward]
            attributes = values[..., 1:].mean(axis=1) if values.ndim == 3 else None  # [n, A]
        return [
            Combined(
                finite(chosen[i]),
                finite(mean[i]),
                finite(std[i]),
                finite(conservative[i]),
                [finite(r) for r in rewards[i]],
                None if attributes is None else dict(zip(self.attributes, map(finite, attributes[i]), strict=True)),
            )  # fmt: skip
            for i in range(len(values))
        ]


def finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


STATISTICS = ("mean", "std", "conservative", "members")
"""What `rm score` writes beside each reward field KEY, as KEY_mean, KEY_std, KEY_conservative and KEY_members."""


def record_fields(rule: EnsembleRule) -> Callable[[list[str], list[MemberOutputs]], tuple[dict[str, Any], int]]:
    """`rm score`'s fields of one record (rm/evaluation/score_file.py's `RecordScoring`) from its texts' member
    outputs: the chosen reward where one model's reward goes (`reward`, `chosen_reward`..., a K-response record's
    `rewards`) and beside it, under that name with a suffix, the mean, the std, the conservative reward and each
    member's reward (`reward_mean`, `reward_std`, `reward_conservative`, `reward_members`; a K-response record's are
    lists in its order); with the count of chosen rewards that are not finite."""

    def fields(keys: list[str], rows: list[MemberOutputs]) -> tuple[dict[str, Any], int]:
        combined = rule.combine(rows)
        values = [[c.reward, *(c.attributes or {}).values()] for c in combined]
        out = output_fields(keys, values, list(rule.attributes))
        for key, c in zip(keys, combined, strict=True):
            for suffix in STATISTICS:
                name, value = f"{key}_{suffix}", getattr(c, suffix)
                if key == GROUP_KEY:
                    out.setdefault(name, []).append(value)
                else:
                    out[name] = value
        return out, sum(c.reward is None for c in combined)

    return fields


STEPS_REFUSED = (
    "a stepwise record asks for step scores, which an ensemble does not give (it scores rewards): score it with "
    "one --model"
)


class RewardRecordsOnly:
    """`rm score`'s record job for an ensemble: a stepwise record is a bad record naming its line (it stops the job,
    or with --on-bad-record skip is left out and counted), every other record scored as one model's are."""

    def __init__(self, records: Any):
        self.records = records

    def lines(self, chunk: list[tuple[str, dict]]) -> list[str]:
        kept = []
        for origin, record in chunk:
            if asks_for_steps(record, published=True):
                self.records.report.reject(origin, RecordError("stepwise", STEPS_REFUSED))  # raises in error mode
            else:
                kept.append((origin, record))
        return self.records.lines(kept)

    def summary(self) -> dict[str, Any]:
        return self.records.summary()
