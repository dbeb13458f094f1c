"""`rm.train(config, train_data=None, eval_data=None, model=None, overrides=())`: one run of `rm train`, from Python.

The run is `rm.training.run.main`, the very function `python -m rm train` calls: the same run directory, eval.json,
checkpoints, export and resume. What the API adds is where its inputs come from:

- `config`: a YAML path, a dict of the YAML's shape, or a `RunConfig`; `overrides` are `rm train`'s dotted
  `key=value` texts, applied last and checked one by one as on the command line.
- `train_data` / `eval_data`: a path, a `datasets.Dataset` or a list of records. Records are written as JSON lines
  into the run's `data/` (`train.jsonl`, `test.jsonl`) and `data.source` names that folder, so the tokenized-data
  cache, data_report.json and resume work as for a file. The files are written inside the run's claim, so they
  are the run's own: train.overwrite replaces them, and a resumed run is given its data again. A path alone is
  `data.source` as it is (a single file holds out `data.eval_fraction`: it has no eval split); with `eval_data`, a
  file is copied in beside the other split. Without `eval_data`, `data.eval_fraction` of the train data is held out.
- `model`: a loaded transformers `…ForSequenceClassification` (num_labels=1, or 1 + model.head.attributes), or a
  peft model around one, trained in place of the one the config describes (one process: a Python object cannot
  be handed to the processes of `accelerate launch`). Its tokenizer is the one its `name_or_path` names, unless the
  config names one; a model built from a config (no name) gets the BPE a random-init run trains. The run's
  config.yaml still describes the config's model: the end-of-run export is complete, but rebuilding one of its
  checkpoints (`rm export RUN/checkpoints/step-N`) needs a config that describes the model.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rm.api.given_data import Data, is_path, jsonl_text, local_file, place, records_of
from rm.config import RunConfig, load_config
from rm.config.loader import apply_overrides, build, check_overrides, to_dict
from rm.config.rundir import RunDir, absolute_paths
from rm.config.schema import validate
from rm.errors import ConfigError


@dataclass
class TrainResult:
    """What a finished (or stopped) run left: where, and its final held-out eval."""

    run_dir: Path
    """The run directory (output_dir): config.yaml, eval.json, checkpoints/, export/."""
    metrics: dict
    """The final eval, as eval.json holds it (`overall`, `subsets`, `train`...); `interrupted` where the run was
    stopped (Ctrl-C, SIGTERM) before its end: its checkpoint is saved, resume it with train.resume=auto."""

    @property
    def export(self) -> Path | None:
        """The end-of-run export (a transformers folder; `rm.load` takes it), or None where the run wrote none."""
        folder = RunDir(self.run_dir).export
        return folder if (folder / "config.json").is_file() else None


def train(
    config: str | Path | dict | RunConfig | None = None,
    train_data: Data | None = None,
    eval_data: Data | None = None,
    model: Any = None,
    *,
    overrides: Sequence[str] = (),
) -> TrainResult:
    """Train, evaluate and export one run, as `python -m rm train CONFIG [overrides]` does (see the module's
    docstring for each input). A user's mistake raises an `rm.errors.RMError` whose text is one line."""
    from rm.training.run import main  # torch and transformers: imported when a run starts

    cfg = run_config(config, list(overrides))
    cfg, write = data_plan(cfg, train_data, eval_data)
    if model is not None:
        cfg = model_plan(cfg, model)
    result = main(cfg, given=model, write_data=write)
    return TrainResult(Path(cfg.output_dir), result)


def run_config(config: str | Path | dict | RunConfig | None, overrides: list[str]) -> RunConfig:
    """The run config from a YAML path, a dict or a `RunConfig` (None: the defaults), `overrides` applied last; each
    checked as `rm train` checks a YAML file, so a mistake names its dotted key."""
    if config is None or is_path(config):
        return load_config(config, overrides)
    if isinstance(config, RunConfig):
        raw, where = to_dict(config), "config (a RunConfig)"
    elif isinstance(config, dict):
        raw, where = copy.deepcopy(config), "config (a dict)"
    else:
        raise ConfigError(f"config: expected a YAML path, a dict or a RunConfig, got a {type(config).__name__}")
    check_overrides(RunConfig, overrides)
    cfg = build(RunConfig, apply_overrides(raw, overrides), where)
    validate(cfg)
    return cfg


def data_plan(cfg: RunConfig, train_data: Data | None, eval_data: Data | None):
    """(the config with `data` pointing at the data, a function writing in-memory data into `<output_dir>/data`, or
    None where nothing is written). Records are serialized here, before the run starts, so a bad one is refused
    before anything is written."""
    if train_data is None:
        if eval_data is not None:
            raise ConfigError("eval_data needs train_data (a config's data.source has its eval split: data.eval_split)")
        return cfg, None
    if is_path(train_data) and eval_data is None:
        single = Path(train_data).expanduser().is_file()
        data = replace(cfg.data, source=str(train_data), eval_split="" if single else cfg.data.eval_split)
        return absolute_paths(replace(cfg, data=data)), None

    def content(data: Data, what: str) -> str | Path:
        return local_file(data, what) if is_path(data) else jsonl_text(records_of(data, what), what)

    splits = {"train": content(train_data, "train_data")}
    if eval_data is not None:
        splits["test"] = content(eval_data, "eval_data")
    cfg = absolute_paths(cfg)
    folder = RunDir(cfg.output_dir).data
    data = replace(cfg.data, source=str(folder), train_split="train", eval_split="test" if eval_data else "")

    def write(target: Path) -> None:
        for split, what in splits.items():
            place(what, target, split)

    return replace(cfg, data=data), write


def model_plan(cfg: RunConfig, model: Any) -> RunConfig:
    """Refuse what a given model cannot go with; name its tokenizer where the config names none."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"model: expected a loaded transformers or peft model, got a {type(model).__name__}")
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    if processes > 1:
        raise ConfigError(
            f"model: a loaded model cannot be handed to {processes} processes; name it in the config instead "
            "(model.name_or_path=...), or run one process"
        )
    if cfg.model.lora.qlora:
        raise ConfigError("model: cannot go with model.lora.qlora=true, which loads model.name_or_path in 4 bits")
    if cfg.model.lora.r and hasattr(model, "peft_config"):
        raise ConfigError("model: already a peft model; set model.lora.r=0 to train its adapters as they are")
    name = getattr(model, "name_or_path", "") or ""
    if name and not (cfg.tokenizer.name_or_path or cfg.model.name_or_path):
        cfg = replace(cfg, tokenizer=replace(cfg.tokenizer, name_or_path=str(name)))
    return cfg
