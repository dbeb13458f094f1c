"""Checks of a run config's values beyond their types and choices: what would crash or quietly do nothing later.

Called by `rm.config.schema.validate`, which raises once with every problem, each naming its dotted key.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from rm.config.head_config import mix_problems

SPLIT_VERSIONS = (1, 2, 3)
"""data.split_version, the hold-out's rules (rm/data/splits.py): 1 by record, 2 by prompt within each subset, 3 by
prompt across every subset (the default). A saved run keeps its version, so it draws the same split again."""

TEXT_VERSIONS = (1, 2)
"""data.text_version, the record -> text rule (rm/data/formats/text_rule.py), saved with every run and export so that
scoring builds the text its training built: 2 (the default) reads a string prompt holding HH turns as those turns, and
`rm score`/`rm serve` render `prompt` + `response` and a text prompt's responses as the rows format does; 1 is the
rule of runs saved before the key existed (such a prompt wrapped in a second user turn; `prompt` + `response` joined
as written)."""

EOS_CONVENTIONS = ("none", "eos", "space_eos")
"""data.eos, how a response ends (rm/data/formats/text_rule.py): `none` (as written: rm's rule before the key existed,
and of every export that records none), `eos` (the tokenizer's EOS after it: TRL's `RewardTrainer` on plain text),
`space_eos` (a space, then the EOS: OpenRLHF's reward dataset). Saved with the run and the export (config.json's
`rm_eos`), so every scorer ends a text as training did."""

NONNEGATIVE = ("train.lr", "train.max_steps", "train.eval_steps", "train.weight_decay", "train.warmup_ratio")
"""train.max_steps=-5 used to run 0 steps and exit 0."""
NONNEGATIVE += ("data.num_proc", "tokenizer.train_pairs", "train.num_threads")
NONNEGATIVE += ("loss.preference_coef", "loss.attribute_coef", "loss.strength_max")
NONNEGATIVE += ("loss.length_corr_coef", "loss.length_orth_coef", "loss.step_preference_coef")
POSITIVE = ("train.log_steps",)
CHOICES: dict[str, tuple[str | bool, ...]] = {
    "model.dtype": ("float32", "bfloat16", "float16"),
    "collator.layout": ("auto", "shared", "packed", "padded"),
    "data.format": ("auto", "hh", "prompt", "conversation", "argilla", "red-team")
    + ("ultrafeedback", "nectar", "rewardbench2", "responses", "rows", "helpsteer2-preference", "steps"),
    "data.group_by_prompt": ("auto", True, False),
    "loss.type": ("pairwise", "plackett_luce"),
    "loss.ties": ("skip", "davidson"),
    "loss.group_weighting": ("group", "pair"),
    "loss.attribute_loss": ("mse", "gaussian"),
    "loss.steps": ("every", "last"),
    "loss.strength": ("none", "soft"),
    "loss.strength_map": ("linear",),
    "data.on_bad_record": ("error", "skip"),
    "data.chat_template": ("auto", "tokenizer", "hh"),
    "data.eos": EOS_CONVENTIONS,
    "train.scheduler": ("cosine", "linear", "constant"),
    "train.mixed_precision": ("", "no", "bf16", "fp16", "auto"),
}
"""Allowed values of the string fields of a run config."""
TRACKERS = ("tensorboard", "wandb", "trackio", "aim", "comet_ml", "mlflow", "clearml", "dvclive", "swanlab", "all")
"""accelerate's tracker names (accelerate.utils.LoggerType), here so a config is checked without importing it."""


def get_dotted(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def choice_problems(cfg: Any, choices: dict[str, tuple[str, ...]]) -> list[str]:
    """One line per dotted key of `cfg` whose value is not among its allowed choices."""
    return [
        f"{key}: {value!r} is not one of {', '.join(map(repr, allowed))}"
        for key, allowed in choices.items()
        if (value := get_dotted(cfg, key)) not in allowed
    ]


def nonfinite_problems(value: Any, key: str = "") -> list[str]:
    """One line per float anywhere in `value` (dataclasses, mappings, lists) that is NaN or infinite: YAML reads
    `.nan` and `.inf` as floats, and `train.lr=.nan` would otherwise pass here and end in torch's traceback."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{key}: must be a finite number, got {value}"]
    if dataclasses.is_dataclass(value):
        items = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = [(f"[{i}]", v) for i, v in enumerate(value)]
    else:
        return []
    problems = []
    for name, v in items:
        inner = f"{key}{name}" if str(name).startswith("[") else f"{key}.{name}" if key else str(name)
        problems += nonfinite_problems(v, inner)
    return problems


def trackers(cfg: Any) -> list[str]:
    """train.report_to as a list: one name alone (TRL's `report_to=wandb`) is a list of one."""
    report_to = cfg.train.report_to
    return [report_to] if isinstance(report_to, str) else list(report_to)


def value_problems(cfg: Any) -> list[str]:
    """Values a run cannot use: sizes that must be positive, fractions out of range, unknown column names."""
    positive = ["train.batch_size", "train.grad_accum", "train.eval_batch_size", "collator.max_length"]
    problems = [f"{k}: must be > 0, got {get_dotted(cfg, k)}" for k in positive if get_dotted(cfg, k) <= 0]
    if not 0.0 < cfg.data.eval_fraction < 1.0:
        problems.append(f"data.eval_fraction: must be in (0, 1), got {cfg.data.eval_fraction}")
    unknown_columns = sorted(set(cfg.data.columns) - {"prompt", "chosen", "rejected", "subset", "margin"})
    if unknown_columns:
        problems.append(f"data.columns.{unknown_columns[0]}: rm's fields are prompt, chosen, rejected, subset, margin")
    problems += [f"data.mixture.{k}: must be >= 0, got {w}" for k, w in cfg.data.mixture.items() if w < 0]
    nonneg = ["model.lora.r", "train.save_steps", "train.save_total_limit"]
    problems += [f"{k}: must be >= 0, got {get_dotted(cfg, k)}" for k in nonneg if get_dotted(cfg, k) < 0]
    if cfg.train.max_nonfinite < 1:
        problems.append(f"train.max_nonfinite: must be >= 1, got {cfg.train.max_nonfinite}")
    if cfg.model.lora.qlora and cfg.model.lora.r <= 0:
        problems.append("model.lora.qlora: QLoRA trains LoRA adapters, so model.lora.r must be > 0")
    if cfg.train.max_steps <= 0 and cfg.train.epochs <= 0:
        problems.append("train.epochs: must be > 0 when train.max_steps is 0")
    return problems


def attribute_problems(cfg: Any) -> list[str]:
    """model.head.attributes and their scales: names that can label an output, [min, max] ranges."""
    names, problems = cfg.model.head.attributes, []
    for name in names:
        if not name.strip() or name == "reward" or names.count(name) > 1:
            why = "empty" if not name.strip() else "output 0's label" if name == "reward" else "given twice"
            problems.append(f"model.head.attributes: {name!r} is {why}; each attribute needs its own name")
            break
    for name, scale in cfg.model.head.attribute_scales.items():
        if name not in names:
            problems.append(f"model.head.attribute_scales.{name}: not one of model.head.attributes {names}")
        elif len(scale) != 2 or not scale[0] < scale[1]:
            problems.append(f"model.head.attribute_scales.{name}: must be [min, max] with min < max, got {scale}")
    if names and cfg.loss.preference_coef == 0 and cfg.loss.attribute_coef == 0:
        problems.append("loss.attribute_coef: 0 with loss.preference_coef 0 leaves nothing to train")
    elif not names and cfg.loss.preference_coef == 0:
        problems.append("loss.preference_coef: 0 trains the attributes alone, but model.head.attributes is empty")
    return problems + mix_problems(cfg.model.head) + length_problems(cfg)


def length_problems(cfg: Any) -> list[str]:
    """The length head (model.head.length) shares the preference term and names its output `length`."""
    problems = []
    if not 0 < cfg.loss.length_stats_momentum <= 1:
        problems.append(f"loss.length_stats_momentum: must be in (0, 1], got {cfg.loss.length_stats_momentum}")
    if not cfg.model.head.length:
        return problems
    if cfg.loss.preference_coef == 0:
        problems.append("model.head.length: trains through the preference term, which loss.preference_coef 0 turns off")
    if "length" in cfg.model.head.attributes:
        problems.append("model.head.attributes: 'length' names the length head's output; rename the attribute")
    return problems


def strength_problems(cfg: Any) -> list[str]:
    """Soft labels are targets of Bradley-Terry's pair probability: a pairwise loss, a preference term."""
    if cfg.loss.strength != "soft":
        return []
    if cfg.loss.type != "pairwise":
        return ["loss.strength: soft labels are targets of a pair's probability; they need loss.type=pairwise"]
    return ["loss.strength: soft with loss.preference_coef 0 trains nothing by it"] * (cfg.loss.preference_coef == 0)


def run_problems(cfg: Any) -> list[str]:
    """One line per problem, each starting with the dotted key; a non-finite number's only problem is that."""
    problems = value_problems(cfg) + attribute_problems(cfg) + strength_problems(cfg)
    problems += [f"{k}: must be >= 0, got {get_dotted(cfg, k):g}" for k in NONNEGATIVE if get_dotted(cfg, k) < 0]
    problems += [f"{k}: must be > 0, got {get_dotted(cfg, k):g}" for k in POSITIVE if not get_dotted(cfg, k) > 0]
    unknown = [name for name in trackers(cfg) if name not in TRACKERS]
    if cfg.data.split_version not in SPLIT_VERSIONS:
        problems.append(
            f"data.split_version: {cfg.data.split_version} is not 1 (by record), 2 (by prompt in each subset) or 3 "
            "(by prompt across subsets)"
        )
    if cfg.data.text_version not in TEXT_VERSIONS:
        problems.append(f"data.text_version: {cfg.data.text_version} is not 1 (earlier runs' rule) or 2")
    nu = cfg.loss.davidson_nu
    if nu != "learned" and (isinstance(nu, str) or nu < 0):
        problems.append(f"loss.davidson_nu: {nu!r} is not 'learned' or a number >= 0")
    elif nu == 0 and cfg.loss.ties == "davidson":  # a tie would be impossible: an infinite loss at the first one
        problems.append("loss.davidson_nu: 0 gives every tie probability 0; set a positive nu or loss.ties=skip")
    if (cfg.export.private or cfg.export.revision) and not cfg.export.push_to_hub:
        problems.append("export.private/export.revision: only apply with export.push_to_hub=REPO_ID")
    if cfg.export.push_to_hub and (not cfg.export.enabled or cfg.model.lora.qlora):
        problems.append(
            "export.push_to_hub: pushes the end-of-run export, which needs export.enabled=true (QLoRA runs "
            "are not exported)"
        )
    problems += [f"train.report_to: unknown tracker {n!r} (one of {', '.join(TRACKERS)}; [] for none)" for n in unknown]
    nonfinite = nonfinite_problems(cfg)
    named = {line.split(":")[0] for line in nonfinite}  # NaN fails a range check too: say only what is wrong with it
    return nonfinite + [line for line in problems if line.split(":")[0] not in named]
