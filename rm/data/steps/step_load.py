"""Stepwise records as `StepSolution`s: each record read in the layout its fields show (step_formats.py).

Files are read by rm's one reader (`rm/data/sources.py`, every format it reads), so every record keeps its
"file:line" and a malformed line is one bad record, not a dead file. Bad records go to the run's `DataReport`
(`data.on_bad_record`): the first stops the load in one line naming file, line and field, or each is skipped and
counted by reason.

One file holds one layout: the first record read without error sets it, and a later record of another layout is
refused (`mixed_formats`). A file mixing them is two sources pasted together, whose labels mean different things
(Math-Shepherd's are estimated from rollouts, PRM800K's are human ratings), which a per-file report and a loss should
not average unseen; such files are meant to be loaded one by one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rm.data.data_report import DataReport
from rm.data.sources import read_file
from rm.data.steps.step_formats import LAYOUT_FIELDS, detect_step_format, parse_step_record
from rm.data.steps.step_records import StepSolution
from rm.errors import DataError, RecordError


def step_solutions(records: Iterable[tuple[str, Any]], report: DataReport) -> list[StepSolution]:
    """Every solution of one file's records, in order; a bad record is rejected through `report`."""
    solutions: list[StepSolution] = []
    layout: tuple[str, str] | None = None  # (the file's layout, the origin that set it)
    for origin, record in records:
        fmt = detect_step_format(record)
        try:
            if layout and fmt and fmt != layout[0]:
                raise _mixed(record, fmt, *layout)
            solutions.append(parse_step_record(record, origin, fmt))
            report.count("formats", fmt)
        except RecordError as e:
            report.reject(origin, e)
            continue
        layout = layout or (fmt, origin)
    return solutions


def load_step_file(path: str | Path, report: DataReport | None = None) -> list[StepSolution]:
    """Every solution of the file, in order; `report` (default: stop at the first bad record) says what to do with
    bad ones. A file with no usable solution is a `DataError`."""
    path = Path(path)
    report = report if report is not None else DataReport()
    solutions = step_solutions(read_file(path, report), report)
    if not solutions:
        raise DataError(f"{path}: no usable stepwise solutions (skipped: {report.skipped_counts() or 'none'})")
    return solutions


def _mixed(record: dict, fmt: str, layout: str, first: str) -> RecordError:
    fields = ", ".join(name for name in LAYOUT_FIELDS[fmt] if name in record)
    message = (
        f"the record is {fmt} (fields {fields}) but the file is {layout} (from {first}): "
        "one file holds one layout; load each layout from a file of its own"
    )
    return RecordError("mixed_formats", message, fields.split(", ")[0])
