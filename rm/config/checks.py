"""Checks of a run config's values beyond their types and choices: what would crash or quietly do nothing later.

Called by `rm.config.schema.validate`, which raises once with every problem, each naming its dotted key.
"""

from __future__ import annotations

from typing import Any

NONNEGATIVE = ("train.lr", "train.max_steps", "train.eval_steps", "train.weight_decay", "train.warmup_ratio")
"""train.max_steps=-5 used to run 0 steps and exit 0."""
NONNEGATIVE += ("data.num_proc", "tokenizer.train_pairs", "train.num_threads")
POSITIVE = ("train.log_steps",)
CHOICES: dict[str, tuple[str, ...]] = {
    "model.dtype": ("float32", "bfloat16", "float16"),
    "collator.layout": ("auto", "shared", "packed", "padded"),
    "data.format": ("auto", "hh", "prompt", "conversation", "argilla", "red-team"),
    "data.on_bad_record": ("error", "skip"),
    "data.chat_template": ("auto", "tokenizer", "hh"),
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


def trackers(cfg: Any) -> list[str]:
    """train.report_to as a list: one name alone (TRL's `report_to=wandb`) is a list of one."""
    report_to = cfg.train.report_to
    return [report_to] if isinstance(report_to, str) else list(report_to)


def run_problems(cfg: Any) -> list[str]:
    """One line per problem, each starting with the dotted key."""
    problems = [f"{k}: must be >= 0, got {get_dotted(cfg, k):g}" for k in NONNEGATIVE if get_dotted(cfg, k) < 0]
    problems += [f"{k}: must be > 0, got {get_dotted(cfg, k):g}" for k in POSITIVE if not get_dotted(cfg, k) > 0]
    unknown = [name for name in trackers(cfg) if name not in TRACKERS]
    if (cfg.export.private or cfg.export.revision) and not cfg.export.push_to_hub:
        problems.append("export.private/export.revision: only apply with export.push_to_hub=REPO_ID")
    if cfg.export.push_to_hub and (not cfg.export.enabled or cfg.model.lora.qlora):
        problems.append(
            "export.push_to_hub: pushes the end-of-run export, which needs export.enabled=true (QLoRA runs "
            "are not exported)"
        )
    problems += [f"train.report_to: unknown tracker {n!r} (one of {', '.join(TRACKERS)}; [] for none)" for n in unknown]
    return problems
