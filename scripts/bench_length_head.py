"""Training throughput with and without the length head (`model.head.length`), interleaved A B A B.

    python scripts/bench_length_head.py                      # 4 rounds of 48 steps each, real HH pairs
    python scripts/bench_length_head.py --rounds 3 --steps 24   # a quicker look

Both modes train the benchmark's small random-init Llama (scripts/benchlib.py: hidden 256, 4 layers) on the same
token ids of the same real harmless-base pairs, 8 pairs a step, padded rows in length-grouped batches, the same
seed; the one difference is `model.head.length=true` (its forward output, correlation and orthogonality terms,
and the statistics update at each optimizer step). Each run is a fresh process (its own allocator and caches);
the first 2 steps are set-up and not timed, the rest give the run's pairs/s. The machine is shared and its speed
drifts, so the modes alternate within each round and each round swaps which goes first (A B, B A, A B ...): both
see the same drift. Printed: each run, the median pairs/s of each mode, and the ratio head / plain (1.0: free).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import benchlib
import torch

MODES = {"plain": [], "length-head": ["model.head.length=true"]}
BATCH = 8
WARM = 2
"""Steps not timed: the first pays for allocation and the model's warm-up in either mode."""


def worker(mode: str, work: Path, steps: int, seed: int, out: Path) -> None:
    from rm.config import load_config
    from rm.training.run import main

    overrides = benchlib.rm_overrides(work, mode, work / "hh", "padded", BATCH, 0, seed, 1e-4, True)
    overrides += [f"train.max_steps={steps}", "train.eval_steps=0", *MODES[mode]]
    stamps: list[tuple[float, int]] = []

    def on_batch(batch: dict, loss: torch.Tensor) -> None:
        stamps.append((time.perf_counter(), len(batch["subset_ids"])))

    main(load_config(None, overrides), on_batch=on_batch)
    timed = stamps[WARM:]
    seconds = timed[-1][0] - stamps[WARM - 1][0]
    out.write_text(json.dumps({"pairs_per_s": sum(n for _, n in timed) / seconds, "steps": len(stamps)}))


def main() -> None:
    ap = benchlib.arguments(__doc__, "bench_length_head", budget=0, slice_s=0.0)
    ap.add_argument("--rounds", type=int, default=4, help="rounds of one run per mode (at least 3)")
    ap.add_argument("--steps", type=int, default=48, help="optimizer steps per run (the first 2 not timed)")
    ap.add_argument("--mode", help="worker: the mode this process runs")
    ap.add_argument("--out", type=Path, help="worker: where it writes its pairs/s")
    args = ap.parse_args()
    torch.set_num_threads(2)
    if args.mode:
        worker(args.mode, args.work, args.steps, args.seed, args.out)
        return
    limit = args.limit or BATCH * args.steps
    bench = benchlib.bench_pairs(args.data, args.work, 64, 512, 8192, args.seed, limit)
    print(f"{len(bench.train)} train pairs, {args.steps} steps of {BATCH} per run; model {benchlib.MODEL}")
    got: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        order = list(MODES) if r % 2 == 0 else list(MODES)[::-1]
        for mode in order:
            out = args.work / f"{mode}-{r}.json"
            cmd = [sys.executable, __file__, "--work", str(args.work), "--seed", str(args.seed)]
            cmd += ["--steps", str(args.steps), "--mode", mode, "--out", str(out)]
            with open(args.work / f"{mode}-{r}.log", "w") as log:
                subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=benchlib.REPO)
            got[mode].append(json.loads(out.read_text())["pairs_per_s"])
            print(f"  round {r + 1} {mode:<12} {got[mode][-1]:7.2f} pairs/s", flush=True)
    med = {m: statistics.median(v) for m, v in got.items()}
    for m, v in got.items():
        print(f"{m:<12} median {med[m]:7.2f} pairs/s (min {min(v):.2f}, max {max(v):.2f}, {len(v)} runs)")
    ratio = med["length-head"] / med["plain"]
    paired = [round(h / p, 3) for h, p in zip(got["length-head"], got["plain"], strict=True)]
    print(f"length head / plain: {ratio:.3f} (by round: {paired})")
    print(json.dumps({"plain_pairs_per_s": round(med["plain"], 3), "head_pairs_per_s": round(med["length-head"], 3),
                      "ratio": round(ratio, 3)}))  # fmt: skip


if __name__ == "__main__":
    main()
