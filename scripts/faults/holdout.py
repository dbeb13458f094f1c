"""Item 14: one prompt in two subsets is never on both sides of the hold-out.

Two folders of an hh-style directory hold the same 60 prompts (each answered apart). `rm train` with a seeded
hold-out (data.eval_split='', eval_fraction 0.2) must hold out each prompt in both folders or in neither: its
data_report.json counts the distinct prompts of each side, which then add up to the 60, each held-out prompt
giving one eval pair per folder, and states split_version 3 and no eval prompt in training. Then an explicit test
split that repeats 5 training prompts: kept as it is, counted in the report and warned about in the log."""

from __future__ import annotations

import json
from pathlib import Path

PROMPTS = 60
FOLDERS = ("alpha", "beta")
SHORT = ["train.max_steps=2", "export.enabled=false", "data.cache=false"]


def write(folder: Path, split: str, prompts: range) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"question {i}?", "chosen": f"{folder.name} yes {i}", "rejected": "no"} for i in prompts]
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def check(c, expect) -> str:
    data = c.root / "holdout-data"
    for name in FOLDERS:
        write(data / name, "train", range(PROMPTS))
    out = c.root / "holdout-run"
    proc = c.train(out, f"data.source={data}", "data.eval_split=", "data.eval_fraction=0.2", *SHORT)
    c.ran(proc, "train with a hold-out")
    report = json.loads((out / "data_report.json").read_text())
    groups, overlap = report["groups"], report.get("overlap", {})
    train, held = groups["train"]["prompts"], groups["eval"]["prompts"]
    expect(groups.get("split_version") == 3, f"split_version {groups.get('split_version')}, not 3")
    expect(train + held == PROMPTS, f"{train} train + {held} held-out prompts of {PROMPTS}: some are on both sides")
    expect(groups["eval"]["groups"] == len(FOLDERS) * held, f"held-out prompts not held out in every folder: {groups}")
    expect(overlap.get("eval_prompts_in_train") == 0, f"data_report.json overlap: {overlap}")
    expect("overlap:" not in proc.stderr, "the log warned of an overlap the hold-out cannot have")

    write(data / "alpha", "test", range(5))  # an explicit eval split of 5 training prompts
    out = c.root / "holdout-eval-split"
    proc = c.train(out, f"data.source={data}", "data.eval_split=test", *SHORT)
    c.ran(proc, "train with an eval split")
    report = json.loads((out / "data_report.json").read_text())
    overlap = report.get("overlap", {})
    expect(overlap.get("eval_prompts_in_train") == 5, f"data_report.json overlap: {overlap}")
    expect(report["pairs"]["eval"] == {"alpha": 5}, f"the eval split changed: {report['pairs']['eval']}")
    warned = [line for line in c.lines(proc.stderr) if "overlap:" in line]
    expect(len(warned) == 1, f"{len(warned)} overlap lines in the log")
    return (
        f"hold-out: {held} of {PROMPTS} prompts held out in both folders, none trained on; eval split: "
        f"{warned[0][warned[0].index('overlap:') :][:70]}…"
    )
