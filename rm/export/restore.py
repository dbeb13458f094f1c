"""Rebuilding a run's reward model from its directory: config, tokenizer, and one set of weights.

A run directory holds `config.yaml`, the tokenizer it trained (`tokenizer/`, random-init models only), `eval.json`,
the end-of-run `export/` and `checkpoints/step-N/` written by `accelerator.save_state`. A checkpoint's
`model.safetensors` holds the `RewardModel` wrapper's state, so every key carries the wrapper's `hf.` prefix. The
model is rebuilt with the same `build_model` call training made (same class, same shapes, same names) and the weights
are loaded into it strictly: a missing or unexpected key stops the export instead of leaving a random tensor.

LoRA checkpoints carry peft's own `adapter_config.json` (`LoraConfig.save_pretrained`) in the checkpoint directory
or the run directory; with it the model is wrapped the same way before loading, so that the LoRA and
`modules_to_save` tensors find their places, and merged later by the export.

Finite weights that score non-finite rewards (a diverged run) are never exported or served: training marks such a
checkpoint (`diverged_mark`); final weights with non-finite eval.json mean rewards are refused (`refuse_diverged`).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rm.config import RunConfig, load_config
from rm.config.exportdir import ExportDir
from rm.config.loader import saved_split_version, saved_text_version
from rm.config.rundir import CHECKPOINTS, CONFIG, MARKER, STATE, WEIGHTS, RunDir, checkpoint_problem, checkpoint_step
from rm.errors import ConfigError, ExportError
from rm.export.length_output import take_wrapper_state
from rm.model.build import build_model
from rm.model.group_loss import learned_nu
from rm.model.lora import peft_model
from rm.model.pretrained import fresh_head_load
from rm.model.reward import transformers_model
from rm.tokens.tokenizer import load_tokenizer, training_tokenizer

log = logging.getLogger("rm")

ADAPTER_CONFIG = "adapter_config.json"
# Prefixes that wrappers add in front of the transformers names: rm's RewardModel (`hf.`) and a
# PeftModel (`base_model.model.`). Both sides of a load are compared without them.
_WRAPPER_PREFIXES = ("hf.", "base_model.model.")


@dataclass
class Source:
    """Where one set of weights comes from, and what the run says about them."""

    run_dir: Path
    cfg: RunConfig
    weights: Path
    """A safetensors file: a checkpoint's `model.safetensors` or the end-of-run export's."""
    step: int | None
    """Optimizer steps behind these weights (None when the checkpoint's name does not say)."""
    final_step: int | None
    """Steps of the finished run, from its eval.json (None while the run has not finished)."""
    run_eval: dict | None
    """The run's eval.json, which describes the final weights only."""
    adapter_dir: Path | None = None
    """Folder holding peft's adapter_config.json when the weights are a LoRA checkpoint."""
    total_steps: int | None = None
    """The steps the run was to take, from its checkpoint's trainer_state.json (None where not recorded)."""
    diverged: str = ""
    """Why these weights diverged (their rewards are not finite), or '' where nothing says they did."""

    @property
    def is_export(self) -> bool:
        """The weights are the run's end-of-run export (already merged, config.json beside them)."""
        return self.weights.parent == RunDir(self.run_dir).export

    @property
    def is_final(self) -> bool:
        return self.step is not None and self.step == self.final_step

    def describe(self) -> str:
        """Which weights these are, in the run's terms: "step 34 of 150: the run has not finished"."""
        if self.is_final:
            return f"step {self.step}, the finished run's final weights"
        total = self.final_step or self.total_steps
        of = f"step {self.step} of {total}" if total else f"step {self.step}, the run's total not recorded"
        return of if self.final_step is not None else f"{of}: the run has not finished"

    def refuse_diverged(self) -> None:
        """Refuse weights whose rewards are not finite, in one line naming the newest good checkpoint."""
        if self.diverged:
            raise diverged_error(self.weights.parent, self.run_dir, self.step, self.diverged)

    def require_finished(self) -> None:
        """Refuse anything but a finished run's final weights (`rm export --require-finished`)."""
        if self.final_step is None:
            total = f" of {self.total_steps}" if self.total_steps else ""
            raise ExportError(
                f"{self.run_dir} has not finished (its newest weights are step {self.step}{total}): finish it with "
                f"python -m rm train {RunDir(self.run_dir).config} train.resume=auto"
            )
        if not self.is_final:
            raise ExportError(
                f"{self.weights} holds the weights of step {self.step}, not the final ones of the run (step "
                f"{self.final_step}): export the run directory {self.run_dir}"
            )


def newest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint that holds model weights (a sharded FSDP state has none to export) and was closed by
    its completion marker; of a run saved before markers, the newest holding weights."""
    found = RunDir(run_dir).complete_checkpoints(holding=WEIGHTS)
    marked = [(s, p) for s, p in found if (p / MARKER).is_file()] or found
    return marked[-1][1] if marked else None


def verified(checkpoint: Path) -> None:
    """Refuse a checkpoint whose files are not as its marker says (truncated, bit-flipped, edited); one without a
    marker (an rm before checksums) is exported with a warning."""
    why = checkpoint_problem(checkpoint)
    if why is not None and (checkpoint / MARKER).exists():
        earlier = [p.name for s, p in RunDir(checkpoint.parent.parent).marked_checkpoints() if p != checkpoint]
        hint = f": export an earlier one ({', '.join(earlier[-3:])})" if earlier else ""
        raise ExportError(f"{checkpoint}: damaged checkpoint: {why}{hint}")
    if why is not None:
        log.warning("export: %s not verified (%s)", checkpoint, why)


def resolve_source(path: str | Path) -> Source:
    """A run directory (its final weights) or one of its checkpoints (`<run>/checkpoints/step-N`)."""
    path = Path(path)
    if not path.is_dir():
        raise ExportError(f"{path}: not a directory (expected a run directory or <run>/checkpoints/step-N)")
    is_checkpoint = (path / WEIGHTS).is_file() or (path / "optimizer.bin").is_file()
    run_dir = RunDir(path.parent.parent if is_checkpoint and path.parent.name == CHECKPOINTS else path)
    config = path / CONFIG if (path / CONFIG).is_file() else run_dir.config
    if not config.is_file():
        raise ExportError(f"{path}: no {CONFIG} here or in {run_dir.root} (is this a run directory of `rm train`?)")
    try:
        cfg = load_config(config)
        split, text = saved_split_version(config), saved_text_version(config)  # the run's hold-out and text rules
        cfg = replace(cfg, data=replace(cfg.data, split_version=split, text_version=text))
    except ConfigError as e:
        raise ExportError(f"cannot rebuild the model: {e}") from None
    run_eval = json.loads(run_dir.eval_json.read_text()) if run_dir.eval_json.is_file() else None
    final_step = run_eval.get("train", {}).get("steps") if run_eval else None

    if is_checkpoint:
        weights, step = path / WEIGHTS, checkpoint_step(path)
        if not weights.is_file():
            found = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
            raise ExportError(
                f"{path}: no {WEIGHTS} (found: {found}); rm exports safetensors checkpoints only, and a sharded "
                "(FSDP) state must be consolidated first"
            )
        verified(path)
    elif (run_dir.export / WEIGHTS).is_file():
        weights, step = run_dir.export / WEIGHTS, final_step  # the end-of-run export: the final weights
    elif (newest := newest_checkpoint(run_dir.root)) is not None:
        weights, step = newest / WEIGHTS, checkpoint_step(newest)
        verified(newest)
        log.info("export: %s has no export/; using its newest checkpoint, %s", run_dir.root, newest.name)
    else:
        raise ExportError(f"{run_dir.root}: no weights (no export/{WEIGHTS} and no checkpoints/step-N/{WEIGHTS})")
    adapter = None
    if weights.parent.parent.name == CHECKPOINTS:  # the end-of-run export is already merged
        adapter = next((d for d in (weights.parent, run_dir.root) if (d / ADAPTER_CONFIG).is_file()), None)
        diverged = diverged_mark(weights.parent)
    else:  # the end-of-run export of an rm that exported diverged runs
        diverged = "its eval.json's mean rewards are not finite" if rewards_not_finite(run_eval) else ""
    total = recorded_total(weights.parent)
    source = Source(run_dir.root, cfg, weights, step, final_step, run_eval, adapter, total, diverged)
    source.refuse_diverged()
    return source


def diverged_error(weights: Path, run_dir: Path, step: int | None, why: str) -> ExportError:
    good = newest_good(run_dir)
    hint = f"use its newest good checkpoint, {good}" if good else "no checkpoint of the run holds good weights"
    at = f" at step {step}" if step is not None else ""
    return ExportError(f"{weights}: the run diverged{at}: {why}; {hint}")


def refuse_diverged_export(run_dir: Path) -> None:
    """Refuse a run directory's end-of-run export where its eval.json's rewards are not finite (an rm before the
    divergence check exported such runs): for `rm serve RUN`, which loads the export as a transformers folder."""
    try:
        run_eval = json.loads(RunDir(run_dir).eval_json.read_text())
    except (OSError, ValueError):
        return
    if rewards_not_finite(run_eval):
        raise diverged_error(RunDir(run_dir).export, run_dir, None, "its eval.json's mean rewards are not finite")


def diverged_mark(checkpoint: Path) -> str:
    """Why training marked `checkpoint` diverged (trainer_state.json's `diverged`: its rewards on the eval set or
    on a fixed probe batch were not finite), or '' (not marked, or a checkpoint of an rm before the mark)."""
    try:
        mark = json.loads((checkpoint / STATE).read_text()).get("diverged")
    except (OSError, ValueError, AttributeError):
        return ""
    return mark if isinstance(mark, str) else ""


def newest_good(run_dir: Path) -> Path | None:
    """The run's newest checkpoint closed by its marker and not marked diverged, or None."""
    good = [p for _, p in RunDir(run_dir).marked_checkpoints() if not diverged_mark(p)]
    return good[-1] if good else None


def rewards_not_finite(result: dict | None) -> bool:
    """Whether an eval result (in memory, NaN; or read from eval.json, null) has pairs whose mean rewards are not
    finite: some reward overflowed to inf or NaN, which no working reward model gives."""
    overall = (result or {}).get("overall") or {}
    if not overall.get("n"):
        return False
    means = [overall.get("mean_chosen_reward"), overall.get("mean_rejected_reward")]
    return not all(isinstance(m, int | float) and math.isfinite(m) for m in means)


def recorded_total(folder: Path) -> int | None:
    """The run's total steps as its checkpoint `folder` recorded them (trainer_state.json's max_steps)."""
    try:
        return json.loads((folder / STATE).read_text()).get("max_steps") or None
    except (OSError, ValueError, AttributeError):
        return None


def run_tokenizer(cfg: RunConfig, run_dir: Path) -> PreTrainedTokenizerBase:
    """The tokenizer the run used: the one it trained (`tokenizer/`), else the named one."""
    trained = RunDir(run_dir).tokenizer
    if trained.is_dir():
        return load_tokenizer(str(trained))
    name = cfg.tokenizer.name_or_path or cfg.model.name_or_path
    if not name:
        raise ExportError(f"{run_dir}: the run trained its own tokenizer but {trained} is missing")
    return training_tokenizer(name, cfg.model.trust_remote_code)


def unwrapped_name(key: str) -> str:
    """A state-dict name without the wrappers' prefixes (`hf.`, `base_model.model.`): the transformers name."""
    for prefix in _WRAPPER_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key


EXTRA_STATE = "tie_nu"
"""A checkpoint's reward-model state beside the transformers weights: Davidson's learned nu (rm/model/objective.py),
which an export keeps in config.json as `rm_davidson_nu`."""


def load_weights(model: torch.nn.Module, weights: Path) -> None:
    """Load a safetensors state into `model`, matching names without wrapper prefixes; all or nothing."""
    target = {unwrapped_name(k): k for k in model.state_dict()}
    with safe_open(str(weights), framework="pt") as f:
        saved = {unwrapped_name(k): k for k in f.keys()}
        if EXTRA_STATE in saved:
            nu = learned_nu(f.get_tensor(saved.pop(EXTRA_STATE)).float())
            transformers_model(model).config.rm_davidson_nu = float(nu)
        take_wrapper_state(model, f, saved)  # gaussian sigmas into config.json; the length head's row kept aside
        missing, unexpected = sorted(set(target) - set(saved)), sorted(set(saved) - set(target))
        if missing or unexpected:
            hint = ""
            if any("lora_" in k for k in unexpected):
                hint = f"; LoRA weights need peft's {ADAPTER_CONFIG} in the checkpoint or run directory"
            raise ExportError(
                f"{weights} does not fit the model rebuilt from the run's config.yaml: {len(missing)} missing "
                f"(e.g. {missing[:3]}), {len(unexpected)} unexpected (e.g. {unexpected[:3]}){hint}"
            )
        state = {target[k]: f.get_tensor(saved[k]) for k in target}
    model.load_state_dict(state, strict=True)


def load_model(source: Source, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel | torch.nn.Module:
    """The model behind `source`: a transformers model, or a PeftModel around one for LoRA checkpoints. The run's
    end-of-run export gives back what its config.json kept of the loss (Davidson's nu, attribute sigmas); one
    written reward-only (export.reward_only) has the reward's output alone, so the model is rebuilt with that."""
    exported = ExportDir(source.weights.parent).model_config
    kept = json.loads(exported.read_text()) if source.is_export and exported.is_file() else {}
    model_cfg = source.cfg.model
    if kept and len(kept.get("id2label") or {0: "reward"}) == 1 and model_cfg.head.attributes:
        model_cfg = replace(model_cfg, head=replace(model_cfg.head, attributes=[], attribute_scales={}))
    with fresh_head_load(model_cfg.name_or_path):  # the checkpoint's weights replace all of it below
        hf = build_model(model_cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model: torch.nn.Module = hf
    if source.adapter_dir is not None:
        from peft import PeftConfig

        model = peft_model(hf, PeftConfig.from_pretrained(str(source.adapter_dir)))
    load_weights(model, source.weights)
    for key in ("rm_davidson_nu", "attribute_sigma"):
        if key in kept:
            setattr(hf.config, key, kept[key])
    broken = [name for name, t in model.state_dict().items() if t.is_floating_point() and not t.isfinite().all()]
    if broken:  # a diverged run's weights: an export would score everything NaN, with exit code 0
        raise ExportError(
            f"{source.weights}: the weights of step {source.step} are not finite ({len(broken)} tensors, e.g. "
            f"{broken[0]}): the run diverged there; export an earlier checkpoint"
        )
    return model.eval()
