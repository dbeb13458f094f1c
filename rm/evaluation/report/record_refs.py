"""How report.html names a record: its own `id` where the data has one, else its file relative to the data's
folder and its line (or row), never a path of the machine that ran the eval.

An item's origin is where the loader read it ("file:line", "file row N", "name[split] row N":
rm/data/sources.py), with the file as the command named it, often absolute. A page that is mailed or put in a
run's artefacts should not carry someone's home folder, and a reader looking for a RewardBench record searches
for its id. The ids are read back from the local files of the few items the page shows (a JSON-lines line is
parsed only where an item came from; a Parquet file's `id` column alone); a Hub dataset's rows keep their
"name[split] row N", which names no local path.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from rm.data.data_report import shown_text
from rm.data.sources import open_text

HUB = re.compile(r"^[^/\s]+/[^/\s]+\[[^\]]*\] row \d+$")


def split_origin(origin: str) -> tuple[str, str, int] | None:
    """(file, "line" or "row", number) of a local origin; None for a Hub row or an origin of another form."""
    if HUB.match(origin):
        return None
    path, sep, row = origin.rpartition(" row ")
    if sep and row.isdigit():
        return path, "row", int(row)
    path, sep, line = origin.rpartition(":")
    if sep and line.isdigit():
        return path, "line", int(line)
    return None


def _ids_of_lines(path: Path, lines: set[int]) -> dict[int, str]:
    """The `id` of each JSON-lines record starting at one of `lines` (1-based), where it parses and has one."""
    found: dict[int, str] = {}
    try:
        with open_text(path) as f:
            for number, text in enumerate(f, 1):
                if number in lines:
                    record = json.loads(text)
                    if isinstance(record, dict) and record.get("id") not in (None, ""):
                        found[number] = str(record["id"])
                if number >= max(lines):
                    break
    except (OSError, UnicodeDecodeError, ValueError):  # a JSON array or CSV line, or a file since moved: no ids
        pass
    return found


def _ids_of_rows(path: Path, rows: set[int]) -> dict[int, str]:
    """The `id` column of a Parquet file at `rows` (0-based), where it has one."""
    try:
        import pyarrow.parquet as pq

        if "id" not in pq.read_schema(path).names:
            return {}
        column = pq.read_table(path, columns=["id"]).column("id").to_pylist()
    except Exception:  # noqa: BLE001 - unreadable now: the page names the row instead
        return {}
    return {r: str(column[r]) for r in rows if r < len(column) and column[r] not in (None, "")}


def record_refs(origins: list[str]) -> dict[str, tuple[str, str]]:
    """origin -> (id or "", where): `where` the file relative to the folder all the origins' files share, with
    its line or row (a Hub row, or an origin of no known form, as it is, its absolute paths hidden)."""
    local = {o: s for o in origins if (s := split_origin(o)) is not None}
    folders = [os.path.dirname(os.path.abspath(s[0])) for s in local.values()]
    root = os.path.commonpath(folders) if folders else ""
    wanted: dict[tuple[str, str], set[int]] = {}
    for path, kind, number in local.values():
        wanted.setdefault((path, kind), set()).add(number)
    ids: dict[tuple[str, str, int], str] = {}
    for (path, kind), numbers in wanted.items():
        if not Path(path).is_file():
            continue
        read = _ids_of_rows if kind == "row" else _ids_of_lines
        ids |= {(path, kind, k): v for k, v in read(Path(path), numbers).items()}
    out = {}
    for origin in origins:
        if origin not in local:
            out[origin] = ("", shown_text(origin))
            continue
        path, kind, number = local[origin]
        name = os.path.relpath(os.path.abspath(path), root)
        where = f"{name} row {number}" if kind == "row" else f"{name}:{number}"
        out[origin] = (ids.get(local[origin], ""), where)
    return out
