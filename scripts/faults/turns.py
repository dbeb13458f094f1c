"""Item 12: prompts of thousands of turns, under a memory cap, as a client or a data file sends them.

Fitting a prompt once tokenized the text from each of its later turns, all at once: an 84 KB /score body of 3,000
turns ran 334 s and aborted the server for memory, and a 610 KB training file with one 20,000-turn record ended in a
MemoryError at 4.4 GB. Here `rm train` on such a file, then `rm score` and `rm eval` on records of 3,000 and 100,000
turns, each as a real command under an address-space cap (RLIMIT_AS), must finish; their durations are printed.
"""

from __future__ import annotations

import json
import resource
import subprocess
import time
from pathlib import Path

CAP = 8 << 30
"""Address space for each command: a tiny run takes about 3 GB at its peak with a 2.6 MB prompt; the linear rule's
suffixes of 100,000 turns are 130 GB."""
TURN = "\n\nHuman: a?\n\nAssistant: b."


def capped(c, *args: str, timeout: int = 600) -> tuple[subprocess.CompletedProcess, float]:
    """`python -m rm ARGS` under `CAP`, and how long it ran."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    started = time.perf_counter()
    proc = subprocess.run(c.command(*args), cwd=Path(__file__).resolve().parents[2], env=c.env, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=limit)  # fmt: skip
    return proc, time.perf_counter() - started


def pair(turns: int, k: int) -> dict:
    prompt = TURN * turns + f"\n\nHuman: question {k}?\n\nAssistant:"
    return {"chosen": prompt + " yes", "rejected": prompt + " no"}


def check(c, expect) -> str:
    folder = c.root / "turns"
    folder.mkdir()
    ordinary = [pair(1, k) for k in range(200)]
    data = folder / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [*ordinary[:100], pair(20_000, 0), *ordinary[100:]]))
    run = folder / "run"
    proc, train_s = capped(c, "train", "configs/quickstart.yaml", "data.synthetic.n_train=48",
                           "model.random_init.hidden_size=32", "model.random_init.intermediate_size=64",
                           "model.random_init.num_hidden_layers=1", "tokenizer.vocab_size=300", "train.batch_size=8",
                           "train.max_steps=2", "train.eval_steps=0", "train.report_to=[]", "train.num_threads=1",
                           f"data.source={data}", "data.eval_split=", f"output_dir={run}")  # fmt: skip
    c.ran(proc, "rm train on a file with a 20,000-turn record")
    records = folder / "long.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in [pair(3_000, 1), pair(100_000, 2), *ordinary[:8]]))
    proc, score_s = capped(c, "score", "--model", run / "export", "--input", records, "--out", folder / "scored.jsonl")
    c.ran(proc, "rm score on records of 3,000 and 100,000 turns")
    rows = [json.loads(line) for line in (folder / "scored.jsonl").read_text().splitlines()]
    expect(rows[0].get("truncated") and rows[1].get("truncated"), f"the long records were not fitted: {rows[:2]}")
    proc, eval_s = capped(c, "eval", "--model", run / "export", "--data", records, "--out", folder / "eval",
                          "--bootstrap-samples", "10")  # fmt: skip
    c.ran(proc, "rm eval on records of 3,000 and 100,000 turns")
    return (f"under a {CAP >> 30} GiB cap: train with a 20,000-turn record {train_s:.1f} s, score of 3,000 and "
            f"100,000 turns {score_s:.1f} s, eval {eval_s:.1f} s")  # fmt: skip
