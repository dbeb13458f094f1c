"""Typed sweep configuration: which run to tune, over which dotted keys, towards which number.

A sweep file names a base run config and a search space over that config's dotted keys; every trial
is the base run with the sampled values as overrides. Keys and types are checked like a run
config's (rm/config/) and every value of the space is tried against the run config before the
first trial starts, so a typo stops the sweep at once, naming the dotted key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rm.config import apply_overrides, build, choice_problems, load_config, read_yaml
from rm.config.loader import YamlLoader, relative_note
from rm.errors import ConfigError
from rm.sweep.sweep_metric import default_direction, metric_problems, read_metric

Value = bool | int | float | str


@dataclass
class ParamSpec:
    """One swept key: a list of values (each one in a grid sweep, a choice otherwise), or a range."""

    values: list[bool | int | float | str] = field(default_factory=list)
    """Values to try; a bare YAML list under the key means this."""
    low: float | None = None
    """Lower end of a range (inclusive)."""
    high: float | None = None
    """Upper end of a range (inclusive)."""
    log: bool = False
    """Sample log-uniformly: for scales such as learning rates, where 1e-4..1e-3 matters as much as 1e-3..1e-2."""
    type: str = "float"
    """Kind of range: float, or int (LoRA ranks, step counts)."""
    step: float = 0.0
    """Spacing of a discretised range; 0 is continuous for floats and 1 for ints."""


@dataclass
class ObjectiveConfig:
    """The number each trial is judged by, read from its final held-out eval (eval.json)."""

    metric: str = "accuracy"
    """accuracy, loss or ece (pairs); top1_accuracy, best_of_k_accuracy or kendall_tau (groups of K);
    suite:<name>[:<section>] (a train.eval_suites score); attribute:<name>:<rmse|pearson|spearman|auc>."""
    subset: str = ""
    """Subset to read the metric from; empty: all eval pairs together (`overall`)."""
    direction: str = ""
    """maximize or minimize; empty: minimize loss, ece and rmse, maximize the rest."""


@dataclass
class PruningConfig:
    """Stopping weak trials early from the metric of their periodic evals (needs train.eval_steps > 0)."""

    pruner: str = "median"
    """median: stop a trial whose eval is worse than the median of earlier trials' at the same step; none: never."""
    startup_trials: int = 2
    """Trials that must finish before any trial can be pruned."""
    warmup_steps: int = 0
    """Optimizer steps of each trial during which its evals never prune it."""


@dataclass
class MergeConfig:
    """Averaging the best trials into one model once the sweep ends (`rm merge`, rm/scoring/weight_average.py)."""

    top_k: int = 0
    """Merge the this-many best finished trials into <sweep_dir>/merged (0: none). Trials must share their start
    (one train.seed: sweep hyperparameters or train.data_seed) and export (export.enabled: true)."""
    max_distance: float = 0.5
    """A trial further than this from the average is refused, as `rm merge --max-distance`."""


@dataclass
class SweepConfig:
    """One sweep. Every key can be set in the sweep YAML or as `key=value` after the file on the command line."""

    base: str = ""
    """Run config YAML every trial starts from (path from the working directory), e.g. configs/quickstart.yaml."""
    overrides: list[str] = field(default_factory=list)
    """Dotted run overrides applied to every trial before the swept values, e.g. [train.max_steps=200]."""
    launcher: str = ""
    """accelerate config YAML each trial is launched with (`accelerate launch --config_file`); empty: one process."""
    launch: str = "auto"
    """in-process, subprocess, or auto: in this process when there is no launcher and parallelism is 1."""
    sweep_dir: str = ""
    """Study database, trial run directories and results; empty: runs/sweeps/<sweep file's stem>."""
    storage: str = ""
    """Optuna storage URL shared by workers (postgresql://…, mysql://…); empty: sqlite file <sweep_dir>/study.db."""
    study_name: str = ""
    """Name of the study inside the storage; empty: the sweep file's stem."""
    sampler: str = "tpe"
    """grid (every combination of the listed values), random, or tpe (Optuna's Tree-structured Parzen Estimator)."""
    seed: int = 0
    """Seed of the sampler (each trial's own seed is its train.seed)."""
    n_trials: int = 0
    """Trials to run to an end (finished, pruned or crashed; interrupted ones are rerun); 0: the grid's size."""
    parallelism: int = 1
    """Trials run at once by each sweep process; workers on other machines add theirs."""
    heartbeat_interval: int = 30
    """Seconds between the heartbeats a sweep process writes to the study for each trial it runs."""
    heartbeat_grace: int = 120
    """Seconds without a heartbeat after which a running trial's process counts as dead (requeued by any worker)."""
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    """What a trial is judged by."""
    pruning: PruningConfig = field(default_factory=PruningConfig)
    """When weak trials stop early."""
    space: dict[str, ParamSpec] = field(default_factory=dict)
    """The search space: dotted run-config key -> a list of values, or {low, high[, log, type, step]}."""
    merge: MergeConfig = field(default_factory=MergeConfig)
    """Averaging the best trials into one model at the end (WARM)."""


CHOICES: dict[str, tuple[str, ...]] = {
    "launch": ("auto", "in-process", "subprocess"),
    "sampler": ("grid", "random", "tpe"),
    "objective.direction": ("", "maximize", "minimize"),
    "pruning.pruner": ("median", "none"),
}


def load_sweep(path: str | Path, overrides: list[str] = ()) -> SweepConfig:
    """Read a sweep YAML, apply `key=value` overrides, check every key and type, and try every swept value.

    `overrides=[...]` on the command line adds to the file's list of run overrides (later ones win) rather
    than replacing it: the file's own (export.enabled=false in configs/sweeps/) are part of the sweep."""
    raw = read_yaml(path)
    for text in overrides:
        one = _shorthand(apply_overrides({}, [text]))
        if isinstance(one.get("overrides"), str):  # overrides=train.max_steps=150: a list of one
            one["overrides"] = [one["overrides"]]
        build(SweepConfig, one, f"override {text}")  # alone first: its mistake is blamed on it, not on the file
        if "overrides" in one:  # added to the file's run overrides, not replacing them
            raw["overrides"] = list(raw.get("overrides") or []) + one["overrides"]
        else:
            apply_overrides(raw, [text])
    cfg = build(SweepConfig, _shorthand(raw), str(path))
    problems = _problems(cfg)
    if problems:
        raise ConfigError(f"{path}: invalid sweep:\n  " + "\n  ".join(problems))
    return cfg


def _shorthand(raw: dict) -> dict:
    """A bare list under a key of `space` is shorthand for {values: [...]}."""
    space = raw.get("space")
    if isinstance(space, dict):
        raw["space"] = {k: {"values": v} if isinstance(v, list) else v for k, v in space.items()}
    return raw


def _problems(cfg: SweepConfig) -> list[str]:
    """Every problem of the sweep at once, in the file's terms (`space.train.lr: ...`)."""
    out = choice_problems(cfg, CHOICES)
    if not cfg.base:
        out.append("base: name the run config every trial starts from, e.g. base: configs/quickstart.yaml")
    if cfg.launcher and not Path(cfg.launcher).is_file():
        out.append(f"launcher: no such accelerate config file: {cfg.launcher}{relative_note(cfg.launcher)}")
    if cfg.launch == "in-process" and (cfg.launcher or cfg.parallelism > 1):
        out.append("launch: in-process runs one 1-process trial at a time (no launcher, parallelism 1)")
    if cfg.parallelism < 1:
        out.append(f"parallelism: must be >= 1, got {cfg.parallelism}")
    if cfg.n_trials < 0 or (cfg.n_trials == 0 and cfg.sampler != "grid"):
        out.append(f"n_trials: must be > 0 for the {cfg.sampler} sampler (0 means the grid's size), got {cfg.n_trials}")
    if cfg.heartbeat_interval < 1 or cfg.heartbeat_grace <= cfg.heartbeat_interval:
        out.append("heartbeat_interval, heartbeat_grace: need 1 <= heartbeat_interval < heartbeat_grace (seconds)")
    if cfg.pruning.startup_trials < 0 or cfg.pruning.warmup_steps < 0:
        out.append("pruning: startup_trials and warmup_steps must be >= 0")
    if cfg.objective.metric == "accuracy" and cfg.objective.direction == "minimize":
        out.append("objective.direction: minimize accuracy? (leave it empty: accuracy is maximised, loss minimised)")
    if not cfg.space:
        out.append("space: name at least one dotted run key to sweep, e.g. space: {train.lr: [1e-4, 3e-4]}")
    try:  # the base run itself, then each value of the space on top of it
        base = load_config(cfg.base, cfg.overrides) if cfg.base else None
    except ConfigError as e:
        base = None
        out.append(f"base/overrides: {e}")
    base_ok = base is not None
    out += metric_problems(cfg.objective.metric, cfg.objective.subset, base)
    for key, spec in cfg.space.items():
        shape = _spec_problems(spec, cfg.sampler)
        out += [f"space.{key}: {p}" for p in shape]
        if shape or not base_ok:
            continue
        for value in spec.values or [spec.low, spec.high]:
            if spec.type == "int" and not spec.values:
                value = int(value)
            try:
                load_config(cfg.base, cfg.overrides + [override(key, value)])
            except ConfigError as e:
                hint = " (an integer key: add type: int)" if not spec.values and "an integer" in str(e) else ""
                out.append(f"space.{key}: the value {value!r} does not fit the run config: {_last_line(e)}{hint}")
                break
    return out


def _spec_problems(spec: ParamSpec, sampler: str) -> list[str]:
    if spec.values:
        return [] if spec.low is None and spec.high is None else ["give either values or low/high, not both"]
    if sampler == "grid":
        return ["a grid sweep needs a list of values here, not a range"]
    if spec.low is None or spec.high is None:
        return ["give a list of values, or a range with both low and high"]
    if spec.type not in ("float", "int"):
        return [f"type: {spec.type!r} is not one of 'float', 'int'"]
    out = [] if spec.low < spec.high else [f"low ({spec.low}) must be below high ({spec.high})"]
    if spec.log and spec.low <= 0:
        out.append(f"a log range needs low > 0, got {spec.low}")
    if spec.log and spec.step:
        out.append("a log range cannot also have a step")
    if spec.type == "int" and not all(float(x).is_integer() for x in (spec.low, spec.high, spec.step)):
        out.append("an int range needs whole-number low, high and step")
    if spec.step < 0:
        out.append(f"step must be >= 0, got {spec.step}")
    return out


def _last_line(e: Exception) -> str:
    return str(e).strip().splitlines()[-1].strip()


def override(key: str, value: Value) -> str:
    """`key=value` text that reads back as exactly `value` (a string that YAML would turn into a number is quoted)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif yaml.load(value, Loader=YamlLoader) == value:
        text = value
    else:
        text = json.dumps(value)
    return f"{key}={text}"


def direction(cfg: SweepConfig) -> str:
    """The objective's direction: the one written, else minimize loss, ece and rmse and maximize the rest."""
    return cfg.objective.direction or default_direction(cfg.objective.metric)


def objective_name(cfg: SweepConfig) -> str:
    return f"eval {cfg.objective.metric} ({cfg.objective.subset or 'overall'})"


def objective_value(result: dict, cfg: SweepConfig) -> float:
    """The objective read from an eval result ({"overall": {...}, "subsets": {name: {...}}, "suites": ...})."""
    return read_metric(result, cfg.objective.metric, cfg.objective.subset)
