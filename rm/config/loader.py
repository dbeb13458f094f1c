"""Reading configs: YAML (safe loader) merged with dotted `key=value` overrides into typed dataclasses.

Every key and type is checked against the dataclass's annotations, and errors name the file and the
dotted key. The sweep config (`rm/sweep/config.py`) is read by the same functions.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from rm.config.atomic import write_text
from rm.config.checks import EOS_CONVENTIONS
from rm.config.schema import RunConfig, validate
from rm.errors import ConfigError


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`, converting only where no information is lost."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        return _build(tp, value, key + ".")
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        if len(args) == 1:
            return _coerce(value, args[0], key)
        for arg in args:  # `bool | int | float | str`: the first type the value fits, in the order written
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                pass
        names = " or ".join(getattr(a, "__name__", str(a)) for a in args)
        raise ConfigError(f"{key}: expected {names}, got {type(value).__name__} {value!r}")
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        return {_coerce(k, key_tp, key): _coerce(v, value_tp, f"{key}.{k}") for k, v in value.items()}
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:  # tuple[X, ...]: a frozen record's list (rm serve's allow_hosts)
        return tuple(_coerce(value, list[typing.get_args(tp)[0]], key))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if isinstance(value, bool):  # YAML 1.1 reads a bare no/yes/off/on as a bool
            word = "no" if value is False else "yes"
            raise ConfigError(
                f"{key}: expected a string, got {value}; YAML reads a bare {word} as {value}, quote it: {key}='{word}'"
            )
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported annotation {tp!r}")  # a bug in this file, not in the YAML


ALIASES = {
    "learning_rate": "train.lr", "num_train_epochs": "train.epochs", "per_device_train_batch_size": "train.batch_size",
    "per_device_eval_batch_size": "train.eval_batch_size", "gradient_accumulation_steps": "train.grad_accum",
    "logging_steps": "train.log_steps", "lr_scheduler_type": "train.scheduler", "max_seq_length": "collator.max_length",
    "max_length": "collator.max_length", "model_name_or_path": "model.name_or_path",
    "center_rewards_coefficient": "loss.center_rewards_coef",
}  # fmt: skip
"""Names other trainers (transformers' TrainingArguments, TRL's RewardConfig) give a setting rm has elsewhere."""


def _build(cls: type, raw: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        known = ", ".join(sorted(names))
        close = difflib.get_close_matches(unknown[0], names, n=1)  # a typo (train.lrr) names what was meant
        alias = ALIASES.get(unknown[0])  # another trainer's name (learning_rate) names rm's, in whichever section
        hint = f", did you mean {alias}?" if alias else f", did you mean {prefix}{close[0]}?" if close else ""
        raise ConfigError(f"unknown key {prefix}{unknown[0]}{hint} (known under {prefix or 'the top level'}: {known})")
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in raw.items()}
    return cls(**kwargs)


class YamlLoader(yaml.SafeLoader):
    """The safe loader, plus floats written without a dot ("1e-4"), which YAML 1.1 reads as strings."""


class FastYamlLoader(getattr(yaml, "CSafeLoader", YamlLoader)):
    """YamlLoader on libyaml's parser, where PyYAML was built with it: a run's config in 0.5 ms rather than 4
    (every `rm eval`, `rm score` and export reads one or more). The constructor, and so what a file may build, is
    the safe one either way; a file it refuses is read again by YamlLoader, whose words the error quotes."""


for _loader in (YamlLoader, FastYamlLoader):
    _loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
        list("-+0123456789."),
    )


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.lr=1e-4` -> (["train", "lr"], 1e-4); the value is read as YAML so lists and bools work."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form dotted.key=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.load(raw, Loader=YamlLoader) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: the value is not valid YAML: {str(e).splitlines()[0]}") from None
    return key.strip().split("."), value


def _merge(raw: dict[str, Any], path: list[str], value: Any) -> None:
    node = raw
    for depth, part in enumerate(path[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{'.'.join(path[: depth + 1])} is a value, not a section")
    node[path[-1]] = value


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML file's top-level mapping, read with the safe loader; errors name the file."""
    try:
        text = Path(path).read_text()
        try:
            raw = yaml.load(text, Loader=FastYamlLoader) or {}
        except yaml.YAMLError:
            raw = yaml.load(text, Loader=YamlLoader) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}{relative_note(path)}") from None
    except yaml.MarkedYAMLError as e:  # one line with file:line:column, not PyYAML's 8 about "<unicode string>"
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        words = e.problem or e.context or "?"
        if e.context and e.problem and e.context_mark:
            words += f", {e.context} from line {e.context_mark.line + 1}, column {e.context_mark.column + 1}"
        raise ConfigError(f"{where}: not valid YAML ({words})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return raw


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Merge `dotted.key=value` texts into a raw (YAML) mapping, in place; later ones win."""
    for text in overrides:
        keys, value = parse_override(text)
        _merge(raw, keys, value)
    return raw


def build(cls: type, raw: dict[str, Any], where: str) -> Any:
    """Build the dataclass `cls` from a raw mapping, checking every key and type; errors start with `where`."""
    try:
        return _build(cls, raw)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """Read a YAML run config (safe loader), apply dotted overrides, check every key and type.

    Each override is first checked on its own, so that its mistake is blamed on it (`override
    train.learning_rate=1: unknown key ...`), not on the YAML file it was merely added to."""
    raw = read_yaml(path) if path is not None else {}
    check_overrides(RunConfig, overrides)
    cfg = build(RunConfig, apply_overrides(raw, overrides), str(path) if path is not None else "defaults")
    validate(cfg)
    return cfg


def saved_split_version(path: str | Path) -> int:
    """data.split_version of a config rm saved (a run's or a checkpoint's config.yaml, the one an export keeps),
    so that resuming, re-exporting or `rm eval --holdout` draws the run's own hold-out again, not the current
    default's: as written, or 1 (by record) where it has none, as runs saved before the key existed held out."""
    data = read_yaml(path).get("data") or {}
    version = data.get("split_version", 1) if isinstance(data, dict) else 1
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError(f"{path}: data.split_version: expected an integer, got {version!r}")
    return version


def saved_text_version(path: str | Path) -> int:
    """data.text_version of a config rm saved, so that scoring an export builds the text its training built: as
    written, or 1 where it has none (runs saved before the key existed read records by that rule)."""
    data = read_yaml(path).get("data") or {}
    version = data.get("text_version", 1) if isinstance(data, dict) else 1
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError(f"{path}: data.text_version: expected an integer, got {version!r}")
    return version


def saved_eos(path: str | Path) -> str:
    """data.eos of a config rm saved ("none" where it has none: the rule before the key existed)."""
    data = read_yaml(path).get("data") or {}
    return recorded_eos(data.get("eos") if isinstance(data, dict) else None, f"{path}: data.eos")


def recorded_eos(value: Any, where: str) -> str:
    """data.eos as a saved run config or an export's config.json (`rm_eos`) records it: absent (None) is "none",
    the rule of every run saved before the key existed; anything but a known convention names `where`."""
    if value is None:
        return "none"
    if value not in EOS_CONVENTIONS:
        raise ConfigError(f"{where}: expected one of {', '.join(EOS_CONVENTIONS)}, got {value!r}")
    return value


def check_overrides(cls: type, overrides: list[str]) -> None:
    """Raise, naming the override, where one `key=value` alone does not fit the schema `cls`."""
    for text in overrides:
        try:
            build(cls, apply_overrides({}, [text]), f"override {text}")
        except ConfigError as e:
            message = str(e)
            raise ConfigError(message if message.startswith("override") else f"override {text}: {message}") from None


def relative_note(path: str | Path) -> str:
    """For a "not found" error: where a relative path was looked for. Paths in a config are read from the
    current directory, not the config's folder (every config in configs/ assumes the repository root)."""
    if Path(path).expanduser().is_absolute():
        return ""
    return f" (a relative path, in a config too, is read from the current directory, {Path.cwd()})"


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """As YAML, written whole or not at all (rm/config/atomic.py): a run's config.yaml is what resumes it."""
    write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))
