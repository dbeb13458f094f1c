"""Bad input, handled without loss: stop at it (the default) or skip it and say so.

Every reader and record parser reports problems here instead of raising or dropping on its own, so
the two modes behave the same for every format:

- `error` (`data.on_bad_record: error`): the first problem raises `DataError` naming the file, the
  line (or row) and the field, before any model is built.
- `skip`: the record is left out and kept in `skipped` with its reason; the run logs the count per
  reason and writes every skipped record to `skipped.jsonl` in the run directory.

Two problems are lossless to fix, a UTF-8 byte-order mark and CRLF line endings: in skip mode the
record is kept with them removed and counted under `repaired` instead of being dropped.

What it writes names files as `shown_path` does (relative to the current directory, else by subset folder and
name), as eval.json and the model card do: these files are shared, and must not publish a machine's paths.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rm.config.rundir import RunDir
from rm.errors import DataError, RecordError

MODES = ("error", "skip")
UNREADABLE = ("unknown_format",)
"""Reasons that say the source's shape is not understood (not that one record is broken): no skip hint."""
SKIP_HINT = "(set data.on_bad_record=skip, or --on-bad-record skip, to leave such records out and count them)"
_ABSOLUTE = re.compile(r"(?<![\w.~:/-])/[^\s:`'\"()\[\]{},;]+")
"""An absolute path inside a text: an origin's file (`/data/hh/train.jsonl:12`), a path quoted in a sentence (not
the `/` of `1/K` or `and/or`, nor a URL's `//`)."""


def shown_path(path: str) -> str:
    """`path` as the files people share (a model card, data_report.json, eval.json, report.md) write it: relative
    to the current directory where it lies under it, else its file name with the folder it is in (a data source's
    subset folder: `harmless-base/train.jsonl.gz`), so that no machine's absolute prefix (a home folder, a
    temporary directory) is published. A relative path, or a name that is no path (a Hub id, `synthetic`), is
    kept as given: it holds no prefix of this machine."""
    expanded = os.path.expanduser(path) if path else path
    if not expanded or not os.path.isabs(expanded):
        return path
    full = Path(os.path.abspath(expanded))
    try:
        here = Path.cwd()
    except OSError:  # the current directory was deleted: nothing to be relative to
        here = None
    if here is not None and full.is_relative_to(here) and here != Path(here.anchor):
        return full.relative_to(here).as_posix() or "."
    parent = full.parent
    if not parent.name or parent == Path.home():  # a folder named after the user is part of the prefix
        return full.name or path
    return f"{parent.name}/{full.name}"


def shown_text(value: Any) -> Any:
    """`value` (a string, or JSON-like lists and dicts of them) with every absolute path in it written as
    `shown_path` writes it: origins (`/data/hh/train.jsonl:12` -> `hh/train.jsonl:12`) and sentences alike."""
    if isinstance(value, str):
        return _ABSOLUTE.sub(lambda m: shown_path(m.group(0)), value)
    if isinstance(value, dict):
        return {k: shown_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown_text(v) for v in value]
    return value


@dataclass
class BadRecord:
    """A record that was left out (or repaired), with where it was and why."""

    origin: str
    """"file:line" or "dataset[split] row N"."""
    reason: str
    """Short code: malformed_json, missing_field, not_a_string, empty_response, identical, bad_turns, ..."""
    field: str | None
    """The field at fault, where there is one."""
    message: str
    """What was wrong, in words."""


@dataclass
class DataReport:
    """What loading did to the data: every record skipped or repaired, and counts of every option applied."""

    on_bad_record: str = "error"
    repair_always: bool = False
    """Apply and count lossless fixes even in error mode (scoring: a repaired text scores the same)."""
    skipped: list[BadRecord] = field(default_factory=list)
    repaired: list[BadRecord] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    """Counts by topic, e.g. {"argilla": {"edit_pairs_added": 3}, "mixture": {...}, "encoding": {...}}."""

    def __post_init__(self) -> None:
        if self.on_bad_record not in MODES:
            raise DataError(f"on_bad_record must be one of {', '.join(MODES)}, got {self.on_bad_record!r}")

    def reject(self, origin: str, error: RecordError) -> None:
        """A record cannot be used: stop (error mode) or leave it out and keep the reason (skip mode)."""
        if self.on_bad_record == "error":  # a record no format fits: skipping would skip them all
            raise DataError(f"{origin}: {error.message}" + ("" if error.reason in UNREADABLE else f" {SKIP_HINT}"))
        self.skipped.append(BadRecord(origin, error.reason, error.field, error.message))

    def repair(self, origin: str, reason: str, message: str, field: str | None = None) -> None:
        """A lossless fix (BOM, CRLF): stop in error mode, or apply it and count it in skip mode."""
        if self.on_bad_record == "error" and not self.repair_always:
            raise DataError(f"{origin}: {message} {SKIP_HINT}")
        self.repaired.append(BadRecord(origin, reason, field, message))

    def count(self, topic: str, key: str, n: int = 1) -> None:
        counts = self.notes.setdefault(topic, {})
        counts[key] = counts.get(key, 0) + n

    def tally(self, topic: str, key: str, value: int) -> None:
        """Count one observation of `value` in the histogram `key` of `topic` ({"0": n, "2": n, ...}, sorted by value
        when reported), e.g. how many annotators rated each response."""
        counts = self.notes.setdefault(topic, {}).setdefault(key, {})
        counts[str(value)] = counts.get(str(value), 0) + 1
        self.notes[topic][key] = dict(sorted(counts.items(), key=lambda kv: int(kv[0])))

    def skipped_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(b.reason for b in self.skipped).items()))

    def repaired_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(b.reason for b in self.repaired).items()))

    def summary(self) -> dict[str, Any]:
        """The JSON-ready report: counts by reason, plus every note."""
        return {
            "on_bad_record": self.on_bad_record,
            "skipped": self.skipped_counts(),
            "repaired": self.repaired_counts(),
            **self.notes,
        }

    def describe(self) -> list[str]:
        """One line per thing a user should know: records left out or repaired, options that changed data."""
        lines = []
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} bad records {self.skipped_counts()} (each in skipped.jsonl)")
        if self.repaired:
            lines.append(f"repaired {len(self.repaired)} records {self.repaired_counts()} (each in skipped.jsonl)")
        for topic in ("argilla", "rows", "grouped", "mixture", "subset_filter", "capped", "attributes"):
            if self.notes.get(topic):
                lines.append(f"{topic}: {self.notes[topic]}")
        return lines + self._shape() + self._overlap()

    def _overlap(self) -> list[str]:
        """Eval prompts the model also trains on (an explicit eval split that shares prompts with the training
        split, or a hold-out drawn by split_version 1 or 2): their scores flatter the model. A warning, not a stop."""
        seen = self.notes.get("overlap", {})
        if not seen.get("eval_prompts_in_train"):
            return []
        version = self.notes.get("groups", {}).get("split_version")
        rule = {1: "splits by record", 2: "draws each subset apart"}.get(version, "")
        why = (
            f"data.split_version {version} {rule}; 3 keeps a prompt on one side in every subset"
            if version is not None
            else "data.eval_split is scored as given, nothing moved"
        )
        return [
            f"overlap: {seen['eval_prompts_in_train']} of {seen['eval_prompts']} eval prompts "
            f"({seen['eval_groups_in_train']} eval examples) are training prompts too, and score higher for it ({why})"
        ]

    def _shape(self) -> list[str]:
        """Prompts, groups and responses per split, where they are not simply one pair per prompt."""
        shape = self.notes.get("groups", {})
        splits = {k: v for k, v in shape.items() if isinstance(v, dict)}
        if not any(v["largest_group"] > 2 or v["prompts"] < v["groups"] for v in splits.values()):
            return []
        said = "; ".join(
            f"{k} {v['prompts']} prompts, {v['groups']} groups, {v['responses']} responses" for k, v in splits.items()
        )
        rule = f" (hold-out split_version {shape['split_version']})" if "split_version" in shape else ""
        return [f"groups: {said}{rule}"]

    def write(self, run_dir: Path) -> None:
        """`data_report.json` (counts) and `skipped.jsonl` (one line per record left out or repaired), their
        origins and paths as `shown_text` writes them: files that are shared, with no prefix of this machine."""
        folder = RunDir(run_dir)
        folder.root.mkdir(parents=True, exist_ok=True)
        folder.data_report.write_text(json.dumps(shown_text(self.summary()), indent=2, ensure_ascii=False) + "\n")
        rows = [{"action": "skipped", **shown_text(asdict(b))} for b in self.skipped]
        rows += [{"action": "repaired", **shown_text(asdict(b))} for b in self.repaired]
        folder.skipped.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
