"""The table scripts/check_clients.sh prints: one row per client and path, the largest |reward - rm score| per export.

python table.py ROWS.jsonl TOLERANCE      # exit status 1 when any cell is missing or over the tolerance
"""

from __future__ import annotations

import json
import sys

KINDS = ("random", "lora", "bos")


def main(rows_file: str, tol: float) -> int:
    rows = [json.loads(line) for line in open(rows_file) if line.startswith("{")]  # clients also print logs
    table: dict[tuple[str, str], dict[str, str]] = {}
    notes: dict[str, int] = {}
    details: dict[int, list[str]] = {}
    bad = 0
    for r in rows:
        cells = table.setdefault((r["client"], r["path"]), {})
        if r.get("error"):
            bad += not r.get("client_bug")
            n = notes.setdefault(r["error"], len(notes) + 1)
            details.setdefault(n, []).append(f"{r['kind']}: {r['detail']}" if r.get("detail") else "")
            cells[r["kind"]] = f"{'client bug' if r.get('client_bug') else 'fails'} ({n})"
            continue
        ok = r["max_abs_diff"] <= tol
        bad += not ok
        cells[r["kind"]] = f"{r['max_abs_diff']:.1e}" + ("" if ok else " (over)")
    print(f"max |reward - rm score| over {rows[0]['n'] if rows else 0} texts per export (tolerance {tol:g})\n")
    print("| client | path | " + " | ".join(KINDS) + " |")
    print("| --- | --- |" + " ---: |" * len(KINDS))
    for (client, path), cells in table.items():
        if "-" in cells:  # a client that did not get as far as an export
            print(f"| {client} | {path} | {cells['-']} |" + " |" * (len(KINDS) - 1))
            continue
        print(f"| {client} | {path} | " + " | ".join(cells.get(k, "missing") for k in KINDS) + " |")
    for note, n in notes.items():
        more = "; ".join(d for d in details[n] if d)
        print(f"\n({n}) {note}" + (f" ({more})" if more else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
