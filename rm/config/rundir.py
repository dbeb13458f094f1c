"""Where a run's files live: one definition of the run directory's layout, for training, export and eval.

<output_dir>/config.yaml              the resolved run config
<output_dir>/eval.json                the final held-out eval
<output_dir>/tokenizer/               the tokenizer trained for the run (random-init models)
<output_dir>/export/                  the end-of-run export
<output_dir>/checkpoints/step-N/      a complete checkpoint (renamed into place when whole)
<output_dir>/checkpoints/.partial-step-N/   one being written
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKPOINTS = "checkpoints"
PARTIAL = ".partial-"
STATE = "trainer_state.json"
"""Written into a checkpoint by training, with the run's position."""
WEIGHTS = "model.safetensors"
"""The model's weights in a checkpoint (accelerate's save_state) and in an export."""
_STEP = re.compile(r"step-(\d+)")


def checkpoint_dir(run_dir: Path, step: int, partial: bool = False) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"{PARTIAL if partial else ''}step-{step}"


def checkpoint_step(path: Path) -> int | None:
    """N for a folder named `step-N`, else None (partial folders and anything else)."""
    match = _STEP.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def checkpoints(run_dir: Path, holding: str = STATE) -> list[tuple[int, Path]]:
    """(step, folder) of every checkpoint of the run that holds the file `holding`, oldest first."""
    found = [(checkpoint_step(p), p) for p in (Path(run_dir) / CHECKPOINTS).glob("step-*")]
    return sorted((s, p) for s, p in found if s is not None and (p / holding).is_file())
