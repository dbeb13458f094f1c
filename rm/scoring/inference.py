"""`load(source)`: the one loader of a trained reward model for inference, with what training decided about it.

`source` is an export folder (or any sequence-classification model folder), a run directory (its export/ when it
has one, else its newest checkpoint rebuilt as `rm export` rebuilds it), one of its checkpoints, or a Hub id.
`rm score`, `rm redteam`, `rm serve` and `rm.load` all load through here, so the same source gives them the same
model, tokenizer, max_length and record -> text rule. Weights that diverged are refused in one line, as `rm export`
refuses them; an unfinished run's newest checkpoint is loaded with one warning naming the step and the total.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from rm.config.exportdir import ExportDir, model_eos
from rm.config.loader import read_yaml, recorded_eos, saved_text_version
from rm.config.rundir import WEIGHTS, RunDir
from rm.data.formats.text_rule import TEXT_VERSION
from rm.errors import ConfigError
from rm.export.folder import merged
from rm.export.restore import load_model, refuse_diverged_export, resolve_source, run_tokenizer
from rm.model.build import DTYPES, check_positions
from rm.model.pretrained import default_max_length, load_reward_model, model_attributes
from rm.model.reward import reward_module
from rm.model.threads import set_threads
from rm.tokens.steps.step_tokens import STEP_SEPARATOR, model_separator

log = logging.getLogger("rm.scoring")

SPLIT_KEYS = ("train_split", "eval_split", "eval_fraction", "split_seed", "split_version")
"""The data keys that decide a run's hold-out: with them `rm eval --holdout` draws the run's held-out pairs again."""


@dataclass
class Loaded:
    """A reward model ready to score, and what its training decided about scoring it."""

    name: str
    """The source as given (a run directory stays a run directory, not its export/)."""
    model: nn.Module
    tokenizer: PreTrainedTokenizerBase
    max_length: int
    """Tokens of prompt + response: the caller's, else the run's collator.max_length, else the model's limit."""
    text_version: int = TEXT_VERSION
    """The record -> text rule the model was trained with (data.text_version: rm/data/formats/text_rule.py)."""
    normalization: dict[str, float] | None = None
    """{"mean", "std"} as the export recorded them (`rm export --normalize`), None where it recorded none."""
    weights: str = ""
    """Which weights of a run rebuilt from a checkpoint ("step 16 of 400: the run has not finished", as `rm export`
    says it); '' for an export, whose model card says it."""
    split: dict[str, Any] = field(default_factory=dict)
    """The run's saved hold-out settings (SPLIT_KEYS) where its folder keeps a config.yaml; {} otherwise."""
    folder: str = ""
    """The transformers folder (or Hub id) loaded: a run directory's export/; '' for weights rebuilt from a
    checkpoint, which `rm eval` cannot read until exported."""
    step_separator: str = STEP_SEPARATOR
    """The text after the problem and after every step when steps are scored (rm/tokens/steps/step_tokens.py): a
    process-reward export's `rm_step_separator`, else the run's data.step_separator, else the default."""
    eos: str = "none"
    """How each response ends (data.eos: rm/data/formats/text_rule.py): an export's config.json `rm_eos`, a rebuilt
    run's data.eos; none where neither records one."""

    @property
    def attributes(self) -> list[str]:
        """Names of outputs 1.. (model.head.attributes of an rm export); [] for a one-output model."""
        return model_attributes(self.model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def load(
    source: str,
    *,
    device: str = "auto",
    dtype: str = "float32",
    max_length: int = 0,
    trust_remote_code: bool = False,
    num_threads: int = 0,
    purpose: str = "scoring",
) -> Loaded:
    """The model at `source` on `device` ("auto": the GPU where there is one). `max_length` 0: the run's
    collator.max_length saved with it, else the model's position limit (at most 2048). `purpose` names the use
    in the one warning an unfinished run's weights get ("serving RUN/checkpoints/step-16 (step 16 of 400: ...)")."""
    set_threads(num_threads)
    run = run_to_restore(source)
    if run is None:
        path = exported(source)
        if path != source:  # a run directory's export: an older rm's may hold diverged weights
            refuse_diverged_export(Path(source).expanduser())
        model, tokenizer = load_reward_model(path, dtype, trust_remote_code, device=device, num_threads=num_threads)
        loaded = Loaded(source, model, tokenizer, max_length or default_max_length(path, model), folder=path)
        loaded.text_version = ExportDir(path).text_version()
        loaded.normalization = recorded_normalization(model.hf.config)
        data = ExportDir(path).section("data")
        loaded.split = {k: v for k, v in data.items() if k in SPLIT_KEYS}
        loaded.step_separator = model_separator(model.hf.config, saved_separator(data))
        loaded.eos = model_eos(model.hf.config)
    else:
        model, tokenizer, run_length, weights = restored(run, dtype, device, purpose)
        loaded = Loaded(source, model, tokenizer, max_length or run_length, weights=weights)
        config = RunDir(run).config
        if config.is_file():
            loaded.text_version = saved_text_version(config)
            data = read_yaml(config).get("data")
            data = data if isinstance(data, dict) else {}
            loaded.split = {k: v for k, v in data.items() if k in SPLIT_KEYS}
            loaded.step_separator = saved_separator(data)
            loaded.eos = recorded_eos(data.get("eos"), f"{config}: data.eos")
    check_positions(loaded.max_length, model.hf.config, "--max-length", source)
    return loaded


def saved_separator(data: dict[str, Any]) -> str:
    """A saved run config's data.step_separator, the default where it saved none (or not a non-empty string)."""
    value = data.get("step_separator")
    return value if isinstance(value, str) and value else STEP_SEPARATOR


def exported(name: str) -> str:
    """A run directory's export folder in place of the run directory; anything else as given."""
    path = Path(name).expanduser()
    run = RunDir(path)
    if path.is_dir() and not ExportDir(path).holds_model and ExportDir(run.export).holds_model:
        return str(run.export)
    return name


def run_to_restore(name: str) -> Path | None:
    """A run directory without an export (or one of its checkpoints): rebuilt from weights, not loaded as a
    transformers folder."""
    path = Path(name).expanduser()
    if not path.is_dir() or ExportDir(path).holds_model:
        return None
    run = RunDir(path)
    if ExportDir(run.export).holds_model:
        return None
    return path if run.config.is_file() or (path / WEIGHTS).is_file() else None


def restored(
    path: Path, dtype: str, device: str, purpose: str = "scoring"
) -> tuple[nn.Module, PreTrainedTokenizerBase, int, str]:
    """(model, tokenizer, the run's collator.max_length, which weights) from a run's newest checkpoint (or the one
    named). Weights that diverged are refused in one line (`resolve_source`); an unfinished run's are loaded with one
    warning line naming the step and the total, as `rm export` gives them."""
    source = resolve_source(path)
    if source.final_step is None:
        log.warning("%s %s (%s)", purpose, source.weights.parent, source.describe())
    tokenizer = run_tokenizer(source.cfg, source.run_dir)
    hf, _ = merged(load_model(source, tokenizer))
    hf = hf.to(DTYPES[dtype])
    model = reward_module(hf)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    log.info("%s %s from its weights %s (no export/ there)", purpose, path, source.weights)
    return model.eval().to(device), tokenizer, source.cfg.collator.max_length, source.describe()


def recorded_normalization(config) -> dict[str, float] | None:
    """The mean and std an export recorded, None where it recorded none (or no usable pair)."""
    try:
        return normalization(config, "")
    except ConfigError:
        return None


def normalization(config, name: str) -> dict[str, float]:
    """The mean and std an export recorded (`rm export --normalize`: `reward_normalization`, and the `mean`/`std`
    keys OpenRLHF reads, which other exports may carry alone)."""
    recorded = getattr(config, "reward_normalization", None)
    pair = (recorded.get("mean"), recorded.get("std")) if isinstance(recorded, dict) else (None, None)
    if pair[0] is None:
        pair = (getattr(config, "mean", None), getattr(config, "std", None))
    try:
        mean, std = float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        raise ConfigError(
            f"--normalize: {name} records no reward mean and std in its config.json (export the run with "
            "`python -m rm export RUN --out DIR --normalize`), or serve raw rewards without --normalize"
        ) from None
    if not (math.isfinite(mean) and math.isfinite(std) and std > 0):
        raise ConfigError(f"--normalize: {name} records mean={mean}, std={std}; std must be a positive number")
    return {"mean": mean, "std": std}
