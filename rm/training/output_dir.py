"""Whose output_dir it is: refused when it holds another run, cleared when asked, claimed with the run's config.

The layout itself (which files say a folder holds a run, which a run writes) is `rm.config.rundir.RunDir`.
"""

from __future__ import annotations

import shutil

from rm.config import RunConfig, save_config
from rm.config.rundir import RunDir
from rm.errors import ConfigError


def check_output_dir(cfg: RunConfig) -> bool:
    """Refuse an output_dir that would silently mix two runs; return True when `train.overwrite` asks to clear it.

    A finished run's eval.json, export, config.yaml and TensorBoard events would otherwise be overwritten
    or mixed with the new run's. Continuing (train.resume) is fine, and so is train.resume=auto in a
    folder whose earlier run stopped before its first checkpoint and never finished.
    """
    out, t = RunDir(cfg.output_dir), cfg.train
    if out.root.exists() and not out.root.is_dir():
        raise ConfigError(f"output_dir={out.root}: is a file, not a directory: choose another output_dir")
    earlier = [path.name for path in out.run_files if path.exists()]
    checkpointed = bool(out.complete_checkpoints())
    if not earlier or (t.resume == "auto" and checkpointed) or t.resume not in ("", "auto"):
        return False
    if t.overwrite:
        return True
    if not t.resume and checkpointed:
        return False  # rm.training.checkpoint.resume_point refuses, naming the newest checkpoint
    finished = out.eval_json.exists()
    if t.resume == "auto" and not finished:
        return False
    raise ConfigError(
        f"output_dir={out.root} already holds {'a finished run' if finished else 'an earlier run'} "
        f"({', '.join(earlier)}): use another output_dir, continue it with train.resume=auto, "
        "or replace it with train.overwrite=true"
    )


def claim_output_dir(cfg: RunConfig, clear: bool) -> None:
    """Create output_dir (clearing an earlier run's files first when `clear`) and save the resolved config."""
    out = RunDir(cfg.output_dir)
    try:
        if clear:
            for path in out.written:
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        out.root.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out.config)
    except OSError as e:
        raise ConfigError(
            f"output_dir={out.root}: cannot write there ({e.strerror or e}): choose another output_dir"
        ) from None
