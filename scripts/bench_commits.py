"""rm at two commits, trained interleaved on the same data: did a change move training throughput?

    python scripts/bench_commits.py c58995f                        # that commit against the working tree
    python scripts/bench_commits.py c58995f HEAD --limit 600 --slice 8

Each commit is checked out into a temporary git worktree and runs its own scripts/bench_train.py
workers (rm padded and rm shared: same model, same token ids, one epoch); benchlib's conductor runs
the four workers in turns (old padded, old shared, new padded, new shared, …), so both commits meet
the same machine. Prints each worker's median pairs/s and held-out accuracy, and new/old per layout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib

LAYOUTS = ("rm-padded", "rm-shared")


def checkout(rev: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(benchlib.REPO), "worktree", "add", "-f", "--detach", str(into), rev], check=True)
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="the commit to compare against")
    ap.add_argument("new", nargs="?", default="", help="the commit to measure (default: the working tree)")
    ap.add_argument("--limit", type=int, default=600, help="training pairs (the real harmless-base file)")
    ap.add_argument("--n-eval", type=int, default=381, help="held-out pairs each worker scores at the end")
    ap.add_argument("--slice", type=float, default=8.0, help="seconds per turn")
    ap.add_argument("--work", type=Path, default=benchlib.REPO / "runs" / "bench_commits")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    bench = benchlib.bench_pairs(benchlib.DEFAULT_DATA, args.work, args.n_eval, 512, 8192, 0, args.limit)
    print(f"{len(bench.train)} train / {len(bench.eval)} held-out pairs")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"old": checkout(args.old, Path(tmp) / "old")}
        trees["new"] = checkout(args.new, Path(tmp) / "new") if args.new else benchlib.REPO
        try:
            rows = run(trees, args.work, args.slice)
        finally:
            for name in ("old", "new"):
                if trees[name] != benchlib.REPO:
                    subprocess.run(["git", "-C", str(benchlib.REPO), "worktree", "remove", "--force", str(trees[name])])
    for key, r in rows.items():
        print(f"{key:<16} pairs/s {r['pairs_per_s']:7.2f}  turns {r['turns']:3d}  held-out acc {r['accuracy']:.4f}")
    for layout in LAYOUTS:
        ratio = rows[f"new {layout}"]["pairs_per_s"] / rows[f"old {layout}"]["pairs_per_s"]
        print(f"{layout}: new/old pairs/s = {ratio:.3f}")


def run(trees: dict[str, Path], work: Path, slice_s: float) -> dict[str, dict]:
    """Each tree's workers in their own folder (sharing the benchmark's pairs and tokenizer), conducted together."""
    commands = {}
    for name, tree in trees.items():
        folder = work / name
        folder.mkdir(exist_ok=True)
        for shared in ("hh", "tokenizer"):
            if not (folder / shared).exists():
                (folder / shared).symlink_to(work / shared)
        for layout in LAYOUTS:
            key = f"{name} {layout}"
            (folder / f"{layout}.progress").unlink(missing_ok=True)
            link = work / f"{key}.progress"  # where the conductor looks for progress
            link.unlink(missing_ok=True)
            link.symlink_to(folder / f"{layout}.progress")
            script = tree / "scripts" / "bench_train.py"
            commands[key] = [sys.executable, str(script), "--work", str(folder), "--worker", layout]
    turns, _ = benchlib.conduct(commands, work, slice_s)
    return {key: benchlib.rates(work / f"{key}.progress", turns[key]) for key in commands}


if __name__ == "__main__":
    main()
