"""Command options from one source: a dataclass whose fields, types, defaults and docstrings make the flags.

The options of `eval`, `score`, `serve`, `export` and `redteam` are dataclasses like the run config
(schema.py): each field is one option and the docstring under it is its `--help` text and its row in
the README's tables (`options_table`). Each command also takes positional `key=value` overrides read and checked
by the run config's own machinery (loader.py), so `rm eval ... batch_size=32` fails as
`rm train ... train.batch_sz=32` does: one line naming the key. Where an option means what a training key
means, it has that key's name (`eval_fraction`, `--eval-fraction`) and keeps its older flag as an alias.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import sys
import types
import typing
from typing import Any

from rm.config.loader import apply_overrides, build, check_overrides
from rm.errors import ConfigError

SETTINGS_HELP = "any option as key=value, its name with _ for - (max_length=512), read as YAML as rm train's overrides"


def option(default: Any = dataclasses.MISSING, *flags: str, positional: bool = False, **argparse_kw: Any) -> Any:
    """A dataclass field that is also a command-line option: `flags` its names (default: `--field-name`), the
    first one primary and the rest aliases kept for old command lines; `argparse_kw` what argparse needs beyond
    the type and default the annotation gives (choices, metavar, required, action, nargs)."""
    meta = {"flags": flags, "positional": positional, "argparse": argparse_kw}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=functools.partial(type(default), default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of `cls` and its dataclass bases, whitespace folded to single spaces."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        tree = ast.parse(inspect.getsource(sys.modules[klass.__module__]))
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == klass.__name__)
        for stmt, after in zip(node.body, node.body[1:], strict=False):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    docs[stmt.target.id] = " ".join(str(after.value.value).split())
    return docs


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def _base(tp: Any) -> Any:
    """`int | None` -> int; list[str] -> str; bool | None stays as it is (a --flag/--no-flag pair)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return tp if args == [bool] else _base(args[0])
    if typing.get_origin(tp) in (list, tuple):
        return typing.get_args(tp)[0]
    return tp


def flag_names(f: dataclasses.Field) -> tuple[str, ...]:
    return f.metadata.get("flags") or (f"--{f.name.replace('_', '-')}",)


def add_flags(p: argparse.ArgumentParser, cls: type) -> None:
    """One argparse option per field of `cls` that `option()` made, its help the field's docstring."""
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    for f in dataclasses.fields(cls):
        if "flags" not in f.metadata:
            continue
        kw = dict(f.metadata["argparse"])
        kw.setdefault("help", docs.get(f.name, "").replace("%", "%%"))
        tp, default = _base(hints[f.name]), _default(f)
        if f.metadata["positional"]:
            p.add_argument(f.name, **kw)
            continue
        if tp is bool:
            kw.setdefault("action", "store_false" if default else "store_true")
        elif typing.get_origin(tp) in (typing.Union, types.UnionType):  # bool | None: unset means the run's own
            kw.setdefault("action", argparse.BooleanOptionalAction)
        elif kw.get("action") != "append":
            kw.setdefault("type", tp)
        if kw.get("action") == "append":
            default = list(default)  # argparse appends to a copy of the default, which a tuple cannot take
        p.add_argument(*flag_names(f), dest=f.name, default=default, **kw)


def add_settings(p: argparse.ArgumentParser) -> None:
    """The positional `key=value` overrides (they may also come after flags: rm/cli/__init__.py's parse)."""
    p.add_argument("settings", nargs="*", default=[], metavar="key=value", help=SETTINGS_HELP)


def settle(args: argparse.Namespace, cls: type) -> Any:
    """The options `cls` the flags and the `key=value` overrides describe (an override wins over its flag).

    Each override is checked alone against `cls` by the run config's loader, so an unknown key or a wrong type
    is one line naming it, and a value outside a flag's choices is refused as argparse refuses the flag."""
    settings = list(getattr(args, "settings", []) or [])
    check_overrides(cls, settings)
    values = {f.name: getattr(args, f.name, _default(f)) for f in dataclasses.fields(cls)}
    for text in settings:
        key = text.split("=", 1)[0].strip()
        values[key] = getattr(build(cls, apply_overrides({}, [text]), f"override {text}"), key)
        choices = next(f for f in dataclasses.fields(cls) if f.name == key).metadata.get("argparse", {}).get("choices")
        if choices and values[key] is not None and values[key] not in choices:
            raise ConfigError(f"override {text}: {key} must be one of {', '.join(choices)}, got {values[key]!r}")
    hints = typing.get_type_hints(cls)
    for name, tp in hints.items():  # argparse gives lists where the field holds a tuple (--allow-host)
        if typing.get_origin(tp) is tuple and isinstance(values.get(name), list):
            values[name] = tuple(values[name])
    return cls(**values)


def _show(f: dataclasses.Field) -> str:
    optional = f.metadata["argparse"].get("nargs") in ("?", "*")  # a positional that may be left out
    if f.metadata["argparse"].get("required") or (f.metadata["positional"] and not _default(f) and not optional):
        return "required"
    value = _default(f)
    if value is None or value == "" or value == [] or value == ():
        return ""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    return f"`{value}`"


def options_table(cls: type) -> str:
    """The options of `cls` as a Markdown table: flag (aliases after it), key for a `key=value` override,
    default, and meaning (the field's docstring), in the order `--help` lists them."""
    docs = field_docs(cls)
    rows = ["| option | key | default | meaning |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        if "flags" not in f.metadata:
            continue
        if f.metadata["positional"]:
            names = f.metadata["argparse"].get("metavar", f.name.upper())
        else:
            names = ", ".join(f"`{n}`" for n in flag_names(f))
        meaning = docs.get(f.name, "").replace("|", "\\|")
        rows.append(f"| {names} | `{f.name}` | {_show(f)} | {meaning} |")
    return "\n".join(rows)
