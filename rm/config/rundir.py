"""Where a run's files live: the one definition of the run directory's layout, for training, export, eval and sweeps.

<output_dir>/config.yaml              the resolved run config
<output_dir>/eval.json                the final held-out eval
<output_dir>/train_log.jsonl          one row per log step, appended as the run goes
<output_dir>/data_report.json         what loading the data skipped, repaired and mixed (counts)
<output_dir>/skipped.jsonl            each record left out or repaired
<output_dir>/data/                    the synthetic dataset (data.source=synthetic)
<output_dir>/tokenizer/               the tokenizer trained for the run (random-init models)
<output_dir>/rm/                      TensorBoard's events (accelerate's project name for the trackers)
<output_dir>/export/                  the end-of-run export (written as .export.partial/, renamed when whole)
<output_dir>/checkpoints/step-N/      a complete checkpoint (renamed into place when whole)
<output_dir>/checkpoints/.partial-step-N/   one being written
<output_dir>/sweep_trial.log          a sweep trial's output (written by the sweep, not by the run)

Every module that reads or writes one of these goes through `RunDir`, so that a file cannot be renamed in
one place and looked for under its old name in another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CONFIG = "config.yaml"
"""The resolved run config, in a run directory and in each of its checkpoints."""
EVAL = "eval.json"
"""An eval result: a run's final eval, an export's, `rm eval`'s (written by rm.evaluation.metrics.write_eval)."""
CHECKPOINTS = "checkpoints"
PARTIAL = ".partial-"
STATE = "trainer_state.json"
"""Written into a checkpoint by training, with the run's position."""
WEIGHTS = "model.safetensors"
"""The model's weights in a checkpoint (accelerate's save_state) and in an export."""
TRACKING = "rm"
"""accelerate's project name for the run's trackers: TensorBoard writes its events to <output_dir>/rm."""
_STEP = re.compile(r"step-(\d+)")


def partial_folder(folder: Path) -> Path:
    """Where `folder` is written before it is renamed into place (`export/` -> `.export.partial/`), so that an
    interrupted write never leaves a half-written folder under the real name."""
    folder = Path(folder)
    return folder.with_name(f".{folder.name}.partial")


@dataclass(frozen=True)
class RunDir:
    """A run's output_dir: the path of every file a run reads or writes there."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))  # cfg.output_dir is a str

    @property
    def config(self) -> Path:
        return self.root / CONFIG

    @property
    def eval_json(self) -> Path:
        return self.root / EVAL

    @property
    def train_log(self) -> Path:
        return self.root / "train_log.jsonl"

    @property
    def data_report(self) -> Path:
        return self.root / "data_report.json"

    @property
    def skipped(self) -> Path:
        return self.root / "skipped.jsonl"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    @property
    def tensorboard(self) -> Path:
        return self.root / TRACKING

    @property
    def export(self) -> Path:
        return self.root / "export"

    @property
    def export_partial(self) -> Path:
        return partial_folder(self.export)

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def trial_log(self) -> Path:
        """A sweep trial's output; the sweep writes it before the run starts, so it is not in `written`."""
        return self.root / "sweep_trial.log"

    def checkpoint(self, step: int, partial: bool = False) -> Path:
        return self.checkpoints / f"{PARTIAL if partial else ''}step-{step}"

    def complete_checkpoints(self, holding: str = STATE) -> list[tuple[int, Path]]:
        """(step, folder) of every checkpoint of the run that holds the file `holding`, oldest first."""
        found = [(checkpoint_step(p), p) for p in self.checkpoints.glob("step-*")]
        return sorted((s, p) for s, p in found if s is not None and (p / holding).is_file())

    @property
    def run_files(self) -> tuple[Path, ...]:
        """What says the folder already holds a run (any one of them)."""
        return (self.config, self.eval_json, self.train_log, self.export, self.checkpoints)

    @property
    def written(self) -> tuple[Path, ...]:
        """Everything a run writes into the folder: what train.overwrite deletes."""
        more = (self.tensorboard, self.data, self.tokenizer, self.data_report, self.skipped, self.export_partial)
        return self.run_files + more


def checkpoint_step(path: Path) -> int | None:
    """N for a folder named `step-N`, else None (partial folders and anything else)."""
    match = _STEP.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None
