"""The table of the end-of-sequence checks (scripts/clients/eos_checks.py): one row per client, path and export.

python eos_table.py EOS_ROWS.jsonl      # exit status 1 when a row that should match rm does not, or failed

A row whose path feeds the export the convention it was trained with (`expect: equal`) must give rm's token ids for
every text, rm's accuracy, and rm's rewards within TOL; the others show the mismatch measured ("differs"), which is
what the model card and README warn about, and fail nothing.
"""

from __future__ import annotations

import json
import sys

TOL = 1e-5


def cells(r: dict) -> tuple[list[str], bool]:
    """The row's cells after client and path, and whether it breaks what it expects."""
    head = [r["kind"], r.get("eos", "-")]
    if r.get("error"):
        return head + [f"error: {r['error']}", "", "", "", ""], True
    if "train_losses" in r:
        losses = ", ".join(f"{x:.4f}" for x in r["train_losses"])
        return head + ["-", "-", "-", f"losses {losses}", "ok"], False
    # TRL's accuracy is a float32 mean: equal to rm's fraction within float32's rounding
    same = abs(r["accuracy"] - r["rm_accuracy"]) < 1e-6
    equal = r["ids_equal"] == r["n"] and same and r["max_abs_diff"] <= TOL
    if r["expect"] == "equal":
        verdict = "ok" if equal else "FAILS"
    else:
        verdict = "equal" if equal else "differs, as expected"
    accuracy = f"{r['accuracy']:.3f} / {r['rm_accuracy']:.3f}"
    row = [f"{r['ids_equal']}/{r['n']}", accuracy, f"{r['max_abs_diff']:.1e}", "", verdict]
    return head + row, r["expect"] == "equal" and not equal


def main(rows_file: str) -> int:
    rows = [json.loads(line) for line in open(rows_file) if line.startswith("{")]
    n = next((r["n"] for r in rows if "n" in r), 0)
    print(f"the EOS convention (data.eos): each client's own path on {n} texts ({n // 2} real HH pairs) against rm's")
    print(f"token ids, `rm eval`'s accuracy and `rm score`'s rewards (tolerance {TOL:g})\n")
    print("| client | path | export | data.eos | rm's ids | accuracy (client / rm) | max abs diff | training | |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |")
    bad = 0
    for r in rows:
        row, broken = cells(r)
        bad += broken
        print(f"| {r['client']} | {r['path']} | " + " | ".join(row) + " |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
