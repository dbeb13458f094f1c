"""What encoding did to a split: groups kept, prompts cut, groups and responses dropped for `collator.max_length`,
and the one warning that says so (again, by a run that reads the split from the cache)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

log = logging.getLogger("rm")

QUANTILES = (50, 90, 95, 99, 100)


def percentiles(values: list[int]) -> dict[str, int]:
    """Nearest-rank percentiles: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    if not ordered:
        return {}
    out = {f"p{q}": ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] for q in QUANTILES[:-1]}
    return out | {"max": ordered[-1]}


@dataclass
class EncodeReport:
    """What encoding did to one split, so nothing is changed or dropped without a count."""

    kept: int = 0
    prompt_truncated: int = 0
    prompt_cut_inside_turn: int = 0
    """Of those, prompts whose last turn alone was still too long, so its oldest tokens went too."""
    too_long: list[str] = field(default_factory=list)
    """Origins of pairs dropped because they cannot fit (a response alone too long, or no room for the prompt)."""
    responses_dropped: int = 0
    """Responses left out of groups that kept two or more others (a response alone too long for max_length)."""
    keeps_99: int = 0
    """The smallest max_length at which 99% of the pairs fit whole (prefix + prompt + longer response), as
    `rm data inspect` computes its percentiles: what the warning advises."""
    pair_tokens: list[int] = field(default_factory=list, repr=False)
    """Each pair's whole length before fitting (not stored: `keeps_99` is), so shares encoded apart merge."""
    steps_cut: int = 0
    """Stepwise data: trailing steps of solutions that did not fit (rm/tokens/steps/step_tokens.py)."""

    @property
    def loaded(self) -> int:
        return self.kept + len(self.too_long)

    def note(self) -> dict:
        """As the data report holds it (data_report.json's "encoding" entry, per split)."""
        return {
            "kept": self.kept,
            "prompt_truncated": self.prompt_truncated,
            "prompt_cut_inside_turn": self.prompt_cut_inside_turn,
            "dropped_too_long": len(self.too_long),
            "dropped_too_long_origins": self.too_long,
            "responses_dropped": self.responses_dropped,
            "keeps_99_max_length": self.keeps_99,
            **({"steps_cut": self.steps_cut} if self.steps_cut else {}),
        }

    @classmethod
    def from_note(cls, note: dict) -> EncodeReport:
        return cls(note["kept"], note["prompt_truncated"], note["prompt_cut_inside_turn"],
                   list(note["dropped_too_long_origins"]), note.get("responses_dropped", 0),
                   note.get("keeps_99_max_length", 0), steps_cut=note.get("steps_cut", 0))  # fmt: skip

    @classmethod
    def merged(cls, parts: list[EncodeReport]) -> EncodeReport:
        """Shares of one split encoded apart (data.num_proc), as one: counts added, origins in order."""
        lengths = [n for p in parts for n in p.pair_tokens]
        return cls(
            sum(p.kept for p in parts),
            sum(p.prompt_truncated for p in parts),
            sum(p.prompt_cut_inside_turn for p in parts),
            [o for p in parts for o in p.too_long],
            sum(p.responses_dropped for p in parts),
            percentiles(lengths).get("p99", 0),
            lengths,
            sum(p.steps_cut for p in parts),
        )

    def too_costly(self) -> bool:
        """More than 5% of the pairs dropped or with a prompt cut inside its last turn: max_length is too small
        for this data (`collator.max_length=8` on the quickstart dropped 2,452 of 9,000 pairs and cut every other
        prompt inside its last turn, and the run still exited 0)."""
        return len(self.too_long) + self.prompt_cut_inside_turn > 0.05 * max(1, self.loaded)

    def warn(self, split: str, max_length: int) -> None:
        """The one warning about what fitting cost (said again by a run that reads the split from the cache)."""
        if self.responses_dropped:
            log.warning(
                "%s: %d responses too long for max_length=%d left their groups (each group kept two or more others)",
                split, self.responses_dropped, max_length,
            )  # fmt: skip
        if self.steps_cut:
            log.warning(
                "%s: %d steps did not fit max_length=%d and are not trained on (a solution keeps its leading steps "
                "that fit; one with none left its problem)", split, self.steps_cut, max_length,
            )  # fmt: skip
        if self.prompt_truncated or self.too_long:
            advice = ""
            if self.too_costly() and self.keeps_99 > max_length:
                advice = f"; collator.max_length={self.keeps_99} keeps 99% of the pairs whole"
            log.warning(
                "%s: %d of %d pairs kept at max_length=%d; %d prompts lost leading turns (%d cut inside their last "
                "turn); %d pairs dropped (a response alone too long, or no token left for the prompt), first: %s%s",
                split, self.kept, self.loaded, max_length, self.prompt_truncated, self.prompt_cut_inside_turn,
                len(self.too_long), self.too_long[:3], advice,
            )  # fmt: skip
