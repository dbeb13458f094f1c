"""Item 15: a run whose weights stay finite while its rewards do not (train.lr=1e30: weights near 1e29).

With train.max_nonfinite=1000 the run trains to its end: it must exit 1 saying it diverged, write no eval.json and no
export, and keep its newest good checkpoint (step-1: the one warm-up step's learning rate is 0) beside the diverged
ones save_total_limit=2 keeps; `rm export RUN` and `rm serve RUN` refuse the diverged newest checkpoint in one line
naming step-1, and step-1 itself exports. With the default max_nonfinite (5) the run stops at step 7 as before, and
its kept checkpoints, all diverged, are refused the same way (rm used to export them with exit status 0)."""

from __future__ import annotations

DIVERGING = ["train.lr=1e30", "train.max_steps=16", "train.warmup_ratio=0.05"]  # round(0.05 x 16) = 1 warm-up step


def check(c, expect) -> str:
    run = c.root / "item15-diverged"
    proc = c.train(run, *DIVERGING, "train.max_nonfinite=1000", "train.save_steps=1", "train.save_total_limit=2")
    said = c.one_line(proc)
    expect(proc.returncode == 1 and "the run diverged" in said, f"exit {proc.returncode}: {said}")
    expect(not (run / "eval.json").exists() and not (run / "export").exists(), "eval.json or export/ written")
    expect(c.steps(run) == [1, 15, 16], f"checkpoints kept: {c.steps(run)}, not step-1 (good) and 15, 16")
    good = run / "checkpoints" / "step-1"
    refused = c.one_line(c.rm("export", run, "--out", c.root / "item15-diverged-export"))
    expect("step-16: the run diverged at step 16" in refused and str(good) in refused, f"export said: {refused}")
    expect(not (c.root / "item15-diverged-export").exists(), "the refused export left a folder")
    served = c.one_line(c.rm("serve", run, "--port", "0", timeout=120))
    expect("the run diverged at step 16" in served, f"serve said: {served}")
    c.ran(c.rm("export", good, "--out", c.root / "item15-diverged-good"), "export of the good step-1")

    stopped = c.root / "item15-diverged-default"
    proc = c.train(stopped, *DIVERGING, "train.save_steps=2")
    line = c.one_line(proc)
    expect(line.startswith("error: stopping at step 7"), f"the default max_nonfinite: {line}")
    again = c.one_line(c.rm("export", stopped, "--out", c.root / "item15-diverged-default-export"))
    expect("the run diverged at step 6" in again and "no checkpoint of the run holds good weights" in again, again)
    return (
        "exit 1, the run diverged, no eval.json or export, step-1 kept beside 15-16; rm export and rm serve refused "
        "step-16 naming step-1; default max_nonfinite: stopped at step 7, step-6 refused"
    )
