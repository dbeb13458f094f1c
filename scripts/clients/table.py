"""The tables scripts/check_clients.sh prints: one row per client and path, the largest |reward - rm score| per
export; then the export with attribute outputs and its reward-only export, one column per output.

python table.py ROWS.jsonl TOLERANCE      # exit status 1 when any cell is failed or over the tolerance

A client's own bug, or its refusal of a multi-output model, is a numbered note and not a failure: the check found
and explained it, and the table says what to use instead.
"""

from __future__ import annotations

import json
import sys

KINDS = ("random", "lora", "bos")
ATTRIBUTE_KINDS = ("attributes", "reward-only")


def transformers_first(client: str) -> tuple:
    """Plain transformers' rows first, oldest version first; the others keep the order they ran in."""
    if not client.startswith("transformers "):
        return (1,)
    return (0, *(int(p) if p.isdigit() else 0 for p in client.split()[1].split(".")))


class Table:
    """Cells keyed by (client, path) and column, and the numbered notes that error cells point to."""

    def __init__(self, tol: float, first_note: int = 1):
        self.tol, self.first_note = tol, first_note
        self.cells: dict[tuple[str, str], dict[str, str]] = {}
        self.notes: dict[str, int] = {}
        self.details: dict[int, list[str]] = {}
        self.bad = 0

    def note(self, r: dict) -> str:
        """The cell of an error row: `fails (n)`, `client bug (n)` or `refuses (n)`, n the note's number."""
        self.bad += not (r.get("client_bug") or r.get("client_refuses"))
        n = self.notes.setdefault(r["error"], self.first_note + len(self.notes))
        self.details.setdefault(n, []).append(f"{r['kind']}: {r['detail']}" if r.get("detail") else "")
        what = "client bug" if r.get("client_bug") else "refuses" if r.get("client_refuses") else "fails"
        return f"{what} ({n})"

    def number(self, diff: float) -> str:
        self.bad += diff > self.tol
        return f"{diff:.1e}" + ("" if diff <= self.tol else " (over)")

    def add(self, r: dict, columns: dict[str, float] | None) -> None:
        """Row `r` into its (client, path) line: one cell under `r["kind"]`, or one per output in `columns`."""
        cells = self.cells.setdefault((r["client"], r["path"]), {})
        if r.get("error"):
            cells[r["kind"]] = self.note(r)
        elif columns is None:
            cells[r["kind"]] = self.number(r["max_abs_diff"])
        else:
            cells |= {f"{r['kind']}: {name}": self.number(diff) for name, diff in columns.items()}

    def print(self, columns: list[str], absent: str) -> None:
        print("| client | path | " + " | ".join(columns) + " |")
        print("| --- | --- |" + " ---: |" * len(columns))
        for (client, path), cells in sorted(self.cells.items(), key=lambda item: transformers_first(item[0][0])):
            if "-" in cells:  # a client that did not get as far as an export
                print(f"| {client} | {path} | {cells['-']} |" + " |" * (len(columns) - 1))
                continue
            spread = [cells.get(c, cells.get(c.split(":")[0], absent)) for c in columns]  # an error spans its export
            print(f"| {client} | {path} | " + " | ".join(spread) + " |")
        for note, n in self.notes.items():
            more = "; ".join(d for d in self.details[n] if d)
            print(f"\n({n}) {note}" + (f" ({more})" if more else ""))


def main(rows_file: str, tol: float) -> int:
    rows = [json.loads(line) for line in open(rows_file) if line.startswith("{")]  # clients also print logs
    plain = Table(tol)
    for r in rows:
        if r["kind"] not in ATTRIBUTE_KINDS:
            plain.add(r, None)
    attributes = Table(tol, first_note=len(plain.notes) + 1)
    outputs: list[str] = []
    for r in rows:
        if r["kind"] in ATTRIBUTE_KINDS:
            diffs = r.get("diffs") or {}
            outputs += [f"{r['kind']}: {name}" for name in diffs if f"{r['kind']}: {name}" not in outputs]
            attributes.add(r, diffs)
    n = rows[0]["n"] if rows else 0
    print(f"max |reward - rm score| over {n} texts per export (tolerance {tol:g})\n")
    plain.print(list(KINDS), "missing")
    outputs.sort(key=lambda c: (ATTRIBUTE_KINDS.index(c.split(":")[0]), not c.endswith(": reward")))
    print(f"\nthe export with attribute outputs, and its reward-only export: max |output - rm score| over {n} texts")
    print("per output (rm score's reward and attributes; the reward-only export against the full export's reward)\n")
    attributes.print(outputs, "-")
    return 1 if plain.bad or attributes.bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
