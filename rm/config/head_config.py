"""The score head's outputs beside the reward: named attribute regressions (issue 26).

Kept out of `rm/config/schema.py` (which nests it as `model.head`) for that module's size; the loader reads
it the same way, key by key.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HeadConfig:
    """What the score head outputs: the reward (output 0, always) and one regression output per attribute."""

    attributes: list[str] = field(default_factory=list)
    """Named ratings to predict beside the reward (output 1 + i is attributes[i]); empty: the reward alone."""
    attribute_scales: dict[str, list[float]] = field(default_factory=dict)
    """Each attribute's [min, max] (HelpSteer2: [0, 4]); a score outside is a bad record. Unlisted: from the data."""
