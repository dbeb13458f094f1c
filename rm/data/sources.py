"""Raw records from files and the Hub, each paired with its origin ("file:line", "file row N", "name[split] row N").

Local files are read here rather than through `datasets` so that every problem can name its line:
JSON lines are decoded one line at a time (a bad line is one bad record, not a dead file), a JSON
array is walked element by element with its line numbers, CSV rows keep the line they start on, and
Parquet rows their index. What cannot be read at all (a corrupt gzip, a broken Parquet footer) is
reported as one `corrupt_file` problem at the point where reading stopped.
"""

from __future__ import annotations

import csv
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rm.data.data_report import DataReport
from rm.data.hub_reach import hub_advice, unreachable
from rm.errors import DataError, RecordError

SUFFIXES = {
    ".jsonl": "json",
    ".jsonl.gz": "json",
    ".json": "json",
    ".json.gz": "json",
    ".csv": "csv",
    ".csv.gz": "csv",
    ".parquet": "parquet",
}
BOM = b"\xef\xbb\xbf"
Records = Iterator[tuple[str, Any]]


def file_kind(path: Path) -> str:
    for suffix, kind in SUFFIXES.items():
        if path.name.endswith(suffix):
            return kind
    raise DataError(f"{path}: unsupported file type (rm reads {', '.join(SUFFIXES)})")


def read_file(path: Path, report: DataReport) -> Records:
    """Every record of a local file, in order, with its origin; problems go to `report`."""
    kind = file_kind(path)
    if not path.is_file():
        raise DataError(f"{path}: cannot read (no such file)")
    if kind == "parquet":
        return _parquet(path, report)
    if kind == "csv":
        return _csv(path, report)
    return _json(path, report)


def _open(path: Path, mode: str = "rb", **kwargs: Any):
    return (gzip.open if path.name.endswith(".gz") else open)(path, mode, **kwargs)


def open_text(path: Path, mode: str = "r") -> IO[str]:
    """A text file, gzip-compressed when its name ends in .gz, as UTF-8 with newlines kept as written."""
    return _open(path, mode + "t", encoding="utf-8", newline="")


def count_records(path: Path) -> int | None:
    """Non-blank lines of a JSON-lines file (a progress bar's total); None for other kinds or a JSON array."""
    try:
        if file_kind(path) != "json":
            return None
        with _open(path) as f:
            if f.read(4096).removeprefix(BOM).lstrip()[:1] == b"[":
                return None
        with _open(path) as f:
            return sum(1 for line in f if line.strip())
    except (OSError, EOFError, zlib.error):
        return None  # the reader itself reports what is wrong with the file


def _unreadable(report: DataReport, path: Path, where: str, error: BaseException) -> None:
    report.reject(
        f"{path}:{where}" if where else str(path),
        RecordError("corrupt_file", f"cannot read the file from here on ({type(error).__name__}: {error})"),
    )


def _json(path: Path, report: DataReport) -> Records:
    """JSON lines; or, when the file's first character is "[", one JSON array of records."""
    try:
        with _open(path) as f:
            head = f.read(4096)
    except (OSError, EOFError, zlib.error) as e:
        _unreadable(report, path, "1", e)
        return
    if head.removeprefix(BOM).lstrip()[:1] == b"[":
        yield from _json_array(path, report)
        return
    lineno = 0
    try:
        with _open(path) as f:
            for lineno, raw in enumerate(f, 1):
                origin = f"{path}:{lineno}"
                if lineno == 1 and raw.startswith(BOM):
                    report.repair(origin, "bom", "the file starts with a UTF-8 byte-order mark (U+FEFF)")
                    raw = raw[len(BOM) :]
                if raw.endswith(b"\r\n"):
                    report.repair(origin, "crlf", "the line ends in CRLF (\\r\\n) instead of LF (\\n)")
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    report.reject(origin, RecordError("not_utf8", f"not valid UTF-8 ({e.reason} at byte {e.start})"))
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as e:
                    report.reject(origin, RecordError("malformed_json", f"malformed JSON {json_problem(e)}"))
                    continue
                yield origin, record
    except (OSError, EOFError, zlib.error) as e:
        _unreadable(report, path, str(lineno + 1), e)


def json_problem(e: json.JSONDecodeError) -> str:
    """ "at column 44 (Expecting ',' delimiter)": the column the decoder stopped at, counted from 1 in
    characters of its line, and its words without their dangling "at" ("Invalid control character at")."""
    return f"at column {e.colno} ({e.msg.removesuffix(' at')})"


def _json_array(path: Path, report: DataReport) -> Records:
    """A JSON array read one element at a time, so each record keeps the line it starts on."""
    try:
        with _open(path) as f:
            data = f.read()
        text = data.removeprefix(BOM).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        _unreadable(report, path, "1", e)
        return
    if data.startswith(BOM):
        report.repair(f"{path}:1", "bom", "the file starts with a UTF-8 byte-order mark (U+FEFF)")
    if "\r\n" in text:
        line = text.count("\n", 0, text.index("\r\n")) + 1
        report.repair(f"{path}:{line}", "crlf", "the file has CRLF (\\r\\n) line endings instead of LF (\\n)")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        line = text.count("\n", 0, pos) + 1
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            message = f"malformed JSON {json_problem(e)}; the rest of the array cannot be read"
            report.reject(f"{path}:{e.lineno}", RecordError("malformed_json", message))
            return
        yield f"{path}:{line}", record


def _csv(path: Path, report: DataReport) -> Records:
    """CSV with a header row; CRLF row ends are standard CSV and fine, a BOM is not."""
    try:
        with _open(path, "rt", encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            names = reader.fieldnames or []
            if names and names[0].startswith("\ufeff"):
                report.repair(f"{path}:1", "bom", "the file starts with a UTF-8 byte-order mark (U+FEFF)")
                reader.fieldnames = [names[0][1:], *names[1:]]
            start = reader.line_num + 1
            for row in reader:
                origin = f"{path}:{start}"
                start = reader.line_num + 1
                if None in row:
                    report.reject(origin, RecordError("malformed_csv", f"more values than the {len(names)} columns"))
                    continue
                yield origin, row
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error) as e:
        _unreadable(report, path, "", e)


def _parquet(path: Path, report: DataReport) -> Records:
    import pyarrow
    import pyarrow.parquet as pq

    row = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            for record in batch.to_pylist():
                yield f"{path} row {row}", record
                row += 1
    except (OSError, pyarrow.ArrowException) as e:
        _unreadable(report, path, "", e)


def read_hub(name: str, split: str, data_dir: str) -> Records:
    """A Hub dataset's split (offline: from the local cache), rows numbered from 0 as `datasets` does."""
    import datasets  # imported here: slow to import and unused by local runs

    try:
        ds = datasets.load_dataset(name, data_dir=data_dir or None, split=split)
    except Exception as e:  # noqa: BLE001 - any failure of the Hub or cache becomes one clear message
        where = f"{name} (data_dir={data_dir})" if data_dir else name
        why = hub_advice(name, "data (a file or folder)") if unreachable() else f"{type(e).__name__}: {e}"
        raise DataError(f"{where}: cannot load split {split!r} ({first_line(why)})") from None
    for i, record in enumerate(ds):
        yield f"{name}[{data_dir or split}] row {i}", record


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
