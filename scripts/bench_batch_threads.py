"""One batch scored whole or in parts at once (`rm serve --batch-threads`): the forward's wall time, in-process.

    python scripts/bench_batch_threads.py                      # 32 GRPO groups in one batch, parts 1 2 3, 3 turns
    python scripts/bench_batch_threads.py --requests 16 --parts 1 2 --turns 5

Set-up: scripts/bench_serve.py --ensemble's (run it once first; its --work folder is read): the medium benchmark
model and its three LoRA members (r=16), the GRPO groups of real harmless-base prompts. The first `--requests`
groups are planned as the server plans them (one batch of at most --max-batch-tokens) and scored by (m) one member
loaded alone (merged, as `rm serve RUN` holds it) and (e) the three as `rm serve --ensemble` holds them, each with
the batch in 1, 2, 3 ... parts at once (the server's `Batcher._forward`, each part a forward in a thread of its
own), with --threads torch threads. Modes run in turns, interleaved (m1 m2 m3 e1 e2 e3, then again), after one
untimed turn; the table gives the median wall time over turns and its ratio to the same model's one-part time.
Rewards of every parted run are checked against the whole batch's (1e-5). The malloc setting of `rm serve` is
applied first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "scripts"))


def batch(scorer, requests: list[dict], budget: int) -> list:
    """The first batch the server would cut from these requests (one /score_groups group each)."""
    from bench_serve import body

    from rm.serve.batch_plan import Job, cut, parts_of
    from rm.serve.bodies import preparing

    jobs = []
    for i, request in enumerate(requests):
        steps = preparing("score_groups", body("rm-groups", request), scorer, 10_000, "truncate")
        try:
            while True:
                next(steps)
        except StopIteration as done:
            jobs.append(Job(str(i), done.value.jobs, lambda _: None))
    return [p.group for p in cut(parts_of(jobs, budget, False, 8192, True), budget)[0]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "bench_serve" / "medium-seed0")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    args = parser.parse_args()
    from rm.serve.batcher import Batcher
    from rm.serve.launch import return_large_frees
    from rm.serve.scorer import load_ensemble_scorer, load_scorer

    return_large_frees()
    runs = [str(args.work / f"lora-r16-{i}") for i in range(3)]
    if not all(Path(r).is_dir() for r in runs):
        sys.exit(f"error: no LoRA members in {args.work}: run scripts/bench_serve.py --ensemble --size medium first")
    common = {"device": "cpu", "dtype": "float32", "trust_remote_code": False, "max_length": 0, "normalize": False,
              "num_threads": args.threads}  # fmt: skip
    models = {"m": load_scorer(runs[0], **common), "e": load_ensemble_scorer(tuple(runs), **common)}
    requests = json.loads((args.work / "requests.json").read_text())["requests"][: args.requests]
    groups = batch(models["m"], requests, args.max_batch_tokens)
    tokens = sum(len(g.prompt_ids) + sum(map(len, g.response_ids)) for g in groups)
    print(f"one batch: {len(groups)} groups, {tokens} tokens; {args.threads} torch threads", flush=True)
    whole = {name: models[name].forward(groups) for name in models}
    batchers = {  # the server's own split and threads (`Batcher._forward`), its thread not started
        f"{name}{k}": Batcher(models[name].forward, False, args.max_batch_tokens, 0, threads=k)
        for name in models
        for k in args.parts
    }
    times: dict[str, list[float]] = {mode: [] for mode in batchers}
    for turn in range(args.turns + 1):
        for mode in times:
            started = time.perf_counter()
            got = batchers[mode]._forward(groups)
            elapsed = time.perf_counter() - started
            worst = max(abs(a - b) for x, y in zip(got, whole[mode[0]], strict=True)
                        for a, b in zip(*(v if isinstance(v, list) else [v] for v in (x, y)), strict=True))  # fmt: skip
            if worst > 1e-5:
                sys.exit(f"error: {mode}'s rewards differ from the whole batch's by {worst:.2e}")
            if turn:
                times[mode].append(elapsed)
                print(f"  turn {turn} {mode}: {elapsed:.2f} s", flush=True)
    print("\n| model | parts | median s | over one part |\n| --- | ---: | ---: | ---: |")
    for mode, values in times.items():
        one = statistics.median(times[mode[0] + str(args.parts[0])])
        label = "one member alone" if mode[0] == "m" else "ensemble of 3 LoRA members"
        print(f"| {label} | {mode[1:]} | {statistics.median(values):.2f} | {statistics.median(values) / one:.2f}x |")


if __name__ == "__main__":
    main()
