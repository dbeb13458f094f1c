"""A run that diverges with finite weights: train.lr=1e30 leaves weights near 1e29, finite, whose rewards overflow.
rm used to train on to the end (train.max_nonfinite=1000), exit 0, export, write `nan` into the card and crash a
later `rm export`; with the default max_nonfinite the kept checkpoints held the diverged weights and exported with
only the "not finished" warning. Now every checkpoint is probed as it is saved and marked diverged where its
rewards are not finite: kept beside the newest good one, never resumed by resume=auto, refused by `rm export` and
`rm serve` in one line, and the run exits 1 saying it diverged.

The warm-up makes step 1's learning rate 0 (cosine schedule, train.warmup_ratio=0.2 of 6 steps: one warm-up step),
so step-1 holds the initial weights, good, and every later step the diverged ones.
"""

import json

import pytest

from conftest import QUICKSTART, TINY_MODEL
from rm.cli import main as cli
from rm.config.rundir import STATE, RunDir
from rm.errors import ExportError
from rm.export.restore import diverged_mark
from rm.serve.scorer import load_scorer
from rm.training.checkpoint import prune
from rm.training.checkpoint_folder import seal

DIVERGING = [
    "data.synthetic.n_train=96",
    "data.synthetic.n_eval=24",
    *TINY_MODEL,
    "train.batch_size=8",
    "train.eval_batch_size=24",
    "train.max_steps=6",
    "train.eval_steps=0",
    "train.log_steps=1",
    "train.lr=1e30",
    "train.warmup_ratio=0.2",
    "train.save_steps=1",
    "train.save_total_limit=2",
    "train.report_to=[]",
    "train.num_threads=1",
]


def error_line(capsys) -> str:
    """The one `error: ...` line of a refused command (progress bars aside), never a traceback."""
    err = capsys.readouterr().err
    lines = [line[line.index("error: ") :] for line in err.replace("\r", "\n").splitlines() if "error: " in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_diverged_run_exits_1_exports_nothing_and_keeps_its_newest_good_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli(["train", str(QUICKSTART), *DIVERGING, "train.max_nonfinite=1000", f"output_dir={out}"]) == 1
    line = error_line(capsys)
    assert line.startswith("error: the run diverged: its rewards on the eval set are not finite after step 6")
    assert f"the newest good checkpoint is {out / 'checkpoints' / 'step-1'}" in line and "train.lr=1e+30" in line
    assert not (out / "eval.json").exists() and not (out / "export").exists()
    # save_total_limit=2 keeps the newest two, diverged, and step-1, the newest good one, beside them.
    kept = RunDir(out).marked_checkpoints()
    assert [s for s, _ in kept] == [1, 5, 6]
    assert [bool(diverged_mark(p)) for _, p in kept] == [False, True, True]
    assert "outputs on a fixed probe batch" in diverged_mark(kept[-1][1])

    assert cli(["export", str(out), "--out", str(tmp_path / "export")]) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: {out / 'checkpoints' / 'step-6'}: the run diverged at step 6: ")
    assert line.endswith(f"use its newest good checkpoint, {out / 'checkpoints' / 'step-1'}")
    assert not (tmp_path / "export").exists()
    with pytest.raises(ExportError, match=r"step-5: the run diverged at step 5"):
        load_scorer(str(out / "checkpoints" / "step-5"), device="cpu", dtype="float32", trust_remote_code=False,
                    max_length=0, normalize=False, num_threads=1)  # fmt: skip
    assert cli(["export", str(out / "checkpoints" / "step-1"), "--out", str(tmp_path / "good")]) == 0


def test_with_the_default_max_nonfinite_no_diverged_checkpoint_is_exported_or_resumed(tmp_path, capsys):
    """Steps 3-7 have non-finite losses: train.max_nonfinite=5 stops the run at step 7, as before; its checkpoints
    (steps 4 and 6 kept of 2, 4, 6) all hold diverged weights, which rm used to export with exit status 0."""
    out = tmp_path / "run"
    more = ["train.max_steps=12", "train.warmup_ratio=0.1", "train.save_steps=2"]  # one warm-up step of 12
    assert cli(["train", str(QUICKSTART), *DIVERGING, *more, f"output_dir={out}"]) == 1
    assert error_line(capsys).startswith("error: stopping at step 7: the loss was non-finite")
    assert [s for s, _ in RunDir(out).marked_checkpoints()] == [4, 6]

    assert cli(["export", str(out), "--out", str(tmp_path / "export")]) == 2
    line = error_line(capsys)
    assert "step-6: the run diverged at step 6: " in line and "outputs on a fixed probe batch" in line
    assert line.endswith("; no checkpoint of the run holds good weights")
    assert cli(["train", str(out / "config.yaml"), "train.resume=auto"]) == 2
    line = error_line(capsys)
    assert f"{out}: no checkpoint to resume: step-6 (diverged: " in line and "step-4 (diverged: " in line


def checkpoint(root, step: int, diverged: str = "") -> None:
    folder = root / "checkpoints" / f"step-{step}"
    folder.mkdir(parents=True)
    (folder / STATE).write_text(json.dumps({"step": step, "diverged": diverged}))
    seal(folder, step)


def test_pruning_never_removes_the_newest_good_checkpoint_for_diverged_ones(tmp_path):
    for step in (1, 2, 3):
        checkpoint(tmp_path, step)
    for step in (4, 5, 6):
        checkpoint(tmp_path, step, diverged="not finite")
    prune(tmp_path, keep=2)
    assert [s for s, _ in RunDir(tmp_path).marked_checkpoints()] == [3, 5, 6]
    checkpoint(tmp_path, 7)  # a good one again: the limit holds as before
    prune(tmp_path, keep=2)
    assert [s for s, _ in RunDir(tmp_path).marked_checkpoints()] == [6, 7]
