"""A file of stepwise records as `StepSolution`s: each record read in the layout its fields show (step_formats.py).

Files are `.jsonl`, `.jsonl.gz` or `.json` (one array; `.json.gz` too), read by rm's one JSON reader
(`rm/data/sources.py`), so every record keeps its "file:line" and a malformed line is one bad record, not a dead
file. A UTF-8 byte-order mark and CRLF line ends are lossless to repair, so they are repaired here in both modes and
counted in `report.repaired`.

One file holds one layout: the first record read without error sets it, and a later record of another layout is
refused (`mixed_formats`). A file mixing them is two sources pasted together, whose labels mean different things
(Math-Shepherd's are estimated from rollouts, PRM800K's are human ratings), which a per-file report and a loss should
not average unseen; such files are meant to be loaded one by one.

Bad records stop the load with the `RecordError` of the first one, its message starting "file:line: " and naming
the field; with `skip_bad`, each is left out and kept in `report.skipped` (origin, reason, field, message) and
`report.skipped_counts()` counts them by reason, the `DataReport` the pair loader fills (rm/data/load.py).
"""

from __future__ import annotations

from pathlib import Path

from rm.data.data_report import BadRecord, DataReport
from rm.data.sources import file_kind, read_file
from rm.data.steps.step_formats import LAYOUT_FIELDS, detect_step_format, parse_step_record
from rm.data.steps.step_records import StepSolution
from rm.errors import DataError, RecordError


def load_step_file(path: str | Path, *, skip_bad: bool = False, report: DataReport | None = None) -> list[StepSolution]:
    """Every solution of the file, in order. `skip_bad` leaves bad records out and records each in `report`
    (required then: it is where the count and the reasons are returned); without it the first bad record raises.
    A file with no usable solution is a `DataError`."""
    if skip_bad and report is None:
        raise ValueError("skip_bad needs a report to count the skipped records in")
    path = Path(path)
    if file_kind(path) != "json":
        raise DataError(f"{path}: stepwise data is read from .jsonl, .jsonl.gz or .json files")
    report = report if report is not None else DataReport()
    reading = DataReport("skip")  # collects what the reader finds; passed on below in line order
    solutions: list[StepSolution] = []
    layout: tuple[str, str] | None = None  # (the file's layout, the origin that set it)

    def bad(origin: str, error: RecordError) -> None:
        if not skip_bad:
            raise RecordError(error.reason, f"{origin}: {error.message}", error.field) from None
        report.skipped.append(BadRecord(origin, error.reason, error.field, error.message))

    def pass_on() -> None:
        report.repaired.extend(reading.repaired)
        problems, reading.skipped, reading.repaired = reading.skipped, [], []
        for problem in problems:  # a line the reader could not decode
            bad(problem.origin, RecordError(problem.reason, problem.message, problem.field))

    for origin, record in read_file(path, reading):
        pass_on()
        fmt = detect_step_format(record)
        try:
            if layout and fmt and fmt != layout[0]:
                raise _mixed(record, fmt, *layout)
            solutions.append(parse_step_record(record, origin, fmt))
        except RecordError as e:
            bad(origin, e)
            continue
        layout = layout or (fmt, origin)
    pass_on()
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
