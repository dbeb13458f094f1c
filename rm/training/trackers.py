"""What a run logs to: the trackers of `train.report_to`, checked to be installed, and the config as they take it.

accelerate's trackers write under <output_dir>/rm (`rm.config.rundir.TRACKING`); TensorBoard is the default.
"""

from __future__ import annotations

from rm.config import RunConfig
from rm.config.checks import trackers
from rm.errors import ConfigError


def check_trackers(cfg: RunConfig) -> list[str]:
    """train.report_to as a list, each tracker installed: accelerate only warns and logs nowhere otherwise."""
    from accelerate.tracking import get_available_trackers

    wanted = trackers(cfg)
    available = {str(t) for t in get_available_trackers()} | {"all"}
    missing = [name for name in wanted if name not in available]
    if missing:
        raise ConfigError(
            f"train.report_to: {', '.join(missing)} is not installed (pip install {' '.join(missing)}), "
            f"so the run would log nowhere: install it, or set train.report_to=[tensorboard] or []"
        )
    return wanted


def flat(d: dict, prefix: str = "") -> dict:
    """Trackers want flat scalars: {"train": {"lr": 1}} -> {"train.lr": 1}; lists become strings."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= flat(v, f"{prefix}{k}.")
        else:
            out[prefix + k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out
