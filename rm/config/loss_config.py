"""The preference objective's settings (`loss.*`), nested in `rm/config/schema.py`'s RunConfig as `loss`.

Kept out of schema.py for that module's size, as head_config.py is; the loader reads it the same way, key by key.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LossConfig:
    """The preference objective: Bradley-Terry over pairs, or over the ordered pairs or whole ranking of a group."""

    type: str = "pairwise"
    """pairwise: Bradley-Terry over a group's ordered pairs; plackett_luce: its whole ranking (pairs: the same)."""
    ties: str = "skip"
    """Tied responses (equal score or rank): skip (no term) or davidson (Davidson's tie model). Hard labels only."""
    davidson_nu: str | float = "learned"
    """Davidson's tie weight nu: learned (a trained scalar kept with the model) or a fixed number >= 0."""
    group_weighting: str = "group"
    """group: a group's pairs weigh 1 in all (InstructGPT); pair: every ordered pair weighs 1."""
    use_margin: bool = False
    """Subtract each pair's `margin` (when the data has one) inside the sigmoid, as in Llama 2's RM."""
    center_rewards_coef: float = 0.0
    """Weight of the mean squared (r_chosen + r_rejected) term that keeps rewards centred on zero."""
    preference_coef: float = 1.0
    """Weight of the preference term in the loss; 0 trains the attribute outputs alone (model.head.attributes)."""
    attribute_coef: float = 1.0
    """Weight of the attribute regression term (only with model.head.attributes)."""
    attribute_loss: str = "mse"
    """Attribute regression: mse, or gaussian (negative log-likelihood with a learned scale per attribute)."""
    strength: str = "none"
    """none: hard labels. soft: a pair's preference strength (its `strength`, HelpSteer2-Preference's
    preference_strength, a rating difference) is the target p of P(chosen > rejected) (pairwise loss only)."""
    strength_map: str = "linear"
    """Strength s to target: linear, p = 0.5 + s / (2 strength_max): -max -> 0, 0 -> 0.5 (a tie), +max -> 1."""
    strength_max: float = 0.0
    """The largest strength of the scale (HelpSteer2-Preference: 3); 0: the data's largest |s|, stated in the data
    report. A strength beyond a declared max is a bad record."""
    length_corr_coef: float = 1.0
    """With model.head.length: weight of ODIN's correlation term, (1 - corr(dl, dn)) + corr(dq, dn)^2 / 2 over the
    ordered pairs' differences of length output, reward and token count. 1.0 is the default of ODIN's training
    script as RLHFlow released it (odin/gemma_two_head.py, `correlation_with_length`, read there)."""
    length_orth_coef: float = 1.0
    """With model.head.length: weight of the orthogonality term cos(w_reward, w_length)^2 between the two heads'
    weight rows (ODIN's |cos|, squared: smooth at 0; see docs/training.md). 1.0 is that script's `ortho_reg`
    default (the term itself is commented out there)."""
    length_stats_momentum: float = 1.0
    """With model.head.length: how far each optimizer step moves the running means and deviations that the
    correlation term standardises by towards the step's own. 1, the default: the last step's alone; a smaller value
    smooths over steps but lags behind them, and on the length check's data (rm/data/length_pairs.py) 0.1's lag let
    the reward overshoot to the opposite correlation with length."""
    steps: str = "every"
    """Stepwise data (rm/data/steps/): every (binary cross-entropy of each step's label, soft labels as given, at
    the step's last token: a process reward model) or last (the last step's alone: an outcome reward model). Each
    optimizer step averages over its steps (every) or solutions (last). Preference data ignores it."""
    step_preference_coef: float = 0.0
    """Stepwise data: weight of the pairwise (or group) loss between a problem's solutions ranked by outcome (every
    step correct above a wrong step; rm/data/steps/step_groups.py), added to the step loss over the same count."""
