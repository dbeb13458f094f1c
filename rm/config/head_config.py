"""The score head's outputs beside the reward: named attribute regressions.

Kept out of `rm/config/schema.py` (which nests it as `model.head`) for that module's size; the loader reads
it the same way, key by key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rm.errors import ConfigError


@dataclass
class HeadConfig:
    """What the score head outputs: the reward (output 0, always) and one regression output per attribute."""

    attributes: list[str] = field(default_factory=list)
    """Named ratings to predict beside the reward (output 1 + i is attributes[i]); empty: the reward alone."""
    attribute_scales: dict[str, list[float]] = field(default_factory=dict)
    """Each attribute's [min, max] (HelpSteer2: [0, 4]); a score outside is a bad record. Unlisted: from the data."""
    reward_from_attributes: dict[str, float] = field(default_factory=dict)
    """The reward as a fixed linear mix of the attribute outputs, {name: weight} (HelpSteer2's recipe, e.g.
    {helpfulness: 0.65, correctness: 0.8, ...}) instead of an output of its own; empty: its own output 0."""
    length: bool = False
    """Train a second output, the length head, beside the reward (ODIN, Chen et al. 2024): the preference loss ranks
    their sum while loss.length_corr_coef ties the length output to the response's token count and unties the
    reward from it. The reward (what eval, export and scoring read) is the quality output alone."""

    def __post_init__(self) -> None:
        # Checked here only once the attributes are known: a dotted override is checked on its own first
        # (rm/config/loader.py:check_overrides), where `attributes` may come from the YAML it is added to.
        if self.attributes:
            problems = mix_problems(self)
            if problems:
                raise ConfigError(problems[0])


def mix_problems(head: HeadConfig) -> list[str]:
    """Why `reward_from_attributes` cannot be a mix of this head's outputs: a name that is not an attribute,
    a weight that is not finite, or a mix without attribute outputs to mix. [] when it can (or is empty)."""
    mix, names = head.reward_from_attributes, head.attributes
    if not mix:
        return []
    if not names:
        return ["model.head.reward_from_attributes: mixes attribute outputs, but model.head.attributes is empty"]
    problems = [
        f"model.head.reward_from_attributes.{name}: not one of model.head.attributes {names}"
        for name in mix
        if name not in names
    ]
    problems += [
        f"model.head.reward_from_attributes.{name}: must be a finite number, got {w}"
        for name, w in mix.items()
        if not math.isfinite(w)
    ]
    return problems


def mix_weights(head: HeadConfig) -> list[float] | None:
    """The mix as one weight per attribute output, in `attributes` order (0 for one left out of it); None without
    a mix (the reward is its own output)."""
    if not head.attributes or not head.reward_from_attributes:
        return None
    return [float(head.reward_from_attributes.get(name, 0.0)) for name in head.attributes]
