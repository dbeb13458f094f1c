"""eval.json's `soft_calibration`: how well P(chosen) = sigmoid(r_chosen - r_rejected) matches the soft
label p a pair's preference strength maps to (`loss.strength=soft`, rm/data/formats/strength.py).

A hard label says only which response is better, so the reliability table of `rm.evaluation.metrics` bins the
model's confidence against how often it is right. A soft label is itself a probability, so here the prediction
is set against the target directly: the pairs are cut into 10 equal-width bins of P(chosen) on [0, 1] (the last
bin closed), and each bin reports its mean P and mean target; `ece` is the pair-weighted mean of
|mean P - mean target| over the bins, `brier` the mean of (P - p)^2 over the pairs (0 for both: the model's
probabilities are the labels). Only pairs with a soft target and two finite rewards count (`n`); where none has
one the block is absent, so an eval of hard labels writes exactly the eval.json it always did.

    {"bins": [{"lo", "hi", "n", "p_mean", "target_mean"}, ...], "ece", "brier", "n"}

The key is not `calibration`: `rm eval`'s eval.json holds the hard-label reliability table under that name.
"""

from __future__ import annotations

import numpy as np
import torch

from rm.evaluation.metrics import p_chosen

BINS = 10


def soft_calibration(chosen, rejected, target, n_bins: int = BINS) -> dict | None:
    """The block above for pairs' rewards and soft targets ([pairs] each, target NaN where the label is hard);
    None when no pair has both a soft target and finite rewards."""
    c, r, t = (np.asarray(x, dtype=np.float64) for x in (chosen, rejected, target))
    used = np.isfinite(t) & np.isfinite(c) & np.isfinite(r)
    if not used.any():
        return None
    p, t = p_chosen(c[used], r[used]), t[used]
    idx = np.minimum((p * n_bins).astype(int), n_bins - 1)
    bins, gap = [], 0.0
    for b in range(n_bins):
        mask = idx == b
        n = int(mask.sum())
        p_mean = float(p[mask].mean()) if n else float("nan")
        target_mean = float(t[mask].mean()) if n else float("nan")
        bins.append({"lo": b / n_bins, "hi": (b + 1) / n_bins, "n": n, "p_mean": p_mean, "target_mean": target_mean})
        gap += n * abs(p_mean - target_mean) if n else 0.0
    n = int(used.sum())
    return {"bins": bins, "ece": gap / n, "brier": float(np.mean((p - t) ** 2)), "n": n}


def gathered_calibration(gathered: dict[str, torch.Tensor]) -> dict | None:
    """`soft_calibration` of `gather_rewards`' strict pairs (rm/evaluation/gather.py), each pair once; None
    where the batches carried no soft target."""
    if "target" not in gathered:
        return None
    return soft_calibration(
        gathered["chosen"].double().numpy(), gathered["rejected"].double().numpy(), gathered["target"].double().numpy()
    )
