"""Checkpoints that prove themselves: a damaged one is never resumed or exported, a kill while a step is
saved again leaves it whole, a diverged model is never kept, and train_log.jsonl stays valid JSON.

Faults are injected in process: bytes flipped or cut in a saved file, a kill simulated by raising at a chosen
moment of a save, weights set to inf in the middle of a run.
"""

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import rm.training.loop
from conftest import QUICKSTART, SIX_STEPS
from rm.cli import main as cli
from rm.config import load_config
from rm.config.rundir import MARKER, STATE, WEIGHTS, RunDir
from rm.errors import RMError, TrainingError
from rm.model.objective import training_loss
from rm.model.reward import group_outputs
from rm.training.checkpoint import resume_point
from rm.training.checkpoint_folder import seal
from rm.training.run import main

RUN = [*SIX_STEPS, "train.save_steps=2", "train.save_total_limit=0"]


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after the moment it is raised runs."""


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """A run killed after its step-6 checkpoint (checkpoints 2, 4, 6; no eval.json), and step 6's weights."""
    out = tmp_path_factory.mktemp("killed") / "run"
    main(load_config(QUICKSTART, RUN + [f"output_dir={out}"]))
    (out / "eval.json").unlink()  # killed before the final eval: the run has not finished
    return out, load_file(out / "checkpoints" / "step-6" / WEIGHTS)


def copy_of(killed_run, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(killed_run[0], out)
    return out


def config(out: Path, *more: str):
    return load_config(QUICKSTART, RUN + [f"output_dir={out}", *more])


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def flip_last_bytes(path: Path) -> None:
    """Flip bits near the end of the file: inside the last tensor's data, the header left intact."""
    data = bytearray(path.read_bytes())
    data[-5:] = bytes(b ^ 0xFF for b in data[-5:])
    path.write_bytes(bytes(data))


@pytest.mark.slow
def test_flipped_bits_in_the_weights_are_caught_on_resume_and_on_export(killed_run, tmp_path, caplog, capsys):
    out = copy_of(killed_run, tmp_path)
    flip_last_bytes(out / "checkpoints" / "step-6" / WEIGHTS)

    code = cli(["export", str(out), "--out", str(tmp_path / "export")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err
    assert "step-6: damaged checkpoint: model.safetensors does not match its checksum" in err and "step-4" in err
    assert not (tmp_path / "export").exists()

    with caplog.at_level(logging.WARNING, logger="rm"):
        result = main(config(out, "train.resume=auto"))
    assert result["train"]["resumed_from"] == str(out / "checkpoints" / "step-4")
    skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert skipped == [f"resume: skipping {out / 'checkpoints' / 'step-6'}: {WEIGHTS} does not match its checksum "
                       "(damaged on disk or edited)"]  # fmt: skip
    # Steps 5-6 trained again from step 4: the weights the damaged checkpoint should have held, exactly.
    assert same(load_file(out / "checkpoints" / "step-6" / WEIGHTS), killed_run[1])


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {
    "truncated safetensors": (lambda c: truncate(c / WEIGHTS), "model.safetensors has"),
    "garbage optimizer.bin": (lambda c: (c / "optimizer.bin").write_bytes(b"\x80garbage" * 100), "optimizer.bin"),
    "bad trainer_state.json": (lambda c: (c / STATE).write_text("{not json"), STATE),
    "no trainer_state.json": (lambda c: (c / STATE).unlink(), f"{STATE} is missing"),
    "damaged RNG states": (lambda c: flip_last_bytes(c / "random_states_0.pkl"), "random_states_0.pkl"),
    "no marker (a save cut short)": (lambda c: (c / MARKER).unlink(), f"no {MARKER}"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_resume_auto_skips_a_damaged_newest_checkpoint_saying_which_and_why(killed_run, tmp_path, caplog, damage):
    out = copy_of(killed_run, tmp_path)
    harm, says = DAMAGE[damage]
    harm(out / "checkpoints" / "step-6")
    with caplog.at_level(logging.WARNING, logger="rm"):
        assert resume_point(config(out, "train.resume=auto")) == out / "checkpoints" / "step-4"
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"resume: skipping {out / 'checkpoints' / 'step-6'}: ") and says in line


def test_a_damaged_optimizer_named_by_path_is_one_line_that_never_advises_weights_only_false(killed_run, tmp_path):
    """A checkpoint without a marker (an rm before checksums) is resumed when named, unverified: torch's own error
    would advise weights_only=False, which runs the file's pickled code."""
    out = copy_of(killed_run, tmp_path)
    step = out / "checkpoints" / "step-6"
    (step / MARKER).unlink()
    (step / "optimizer.bin").write_bytes(b"\x80\x02garbage" * 100)
    with pytest.raises(RMError) as err:
        main(config(out, f"train.resume={step}"))
    message = str(err.value)
    assert message.startswith(f"{step}: cannot resume it") and "\n" not in message
    assert "weights_only" not in message


def test_a_kill_while_a_step_is_saved_again_leaves_a_whole_checkpoint(killed_run, tmp_path, monkeypatch):
    """A run resumed from step 2 saves step 4 again. Killed while the old step-4 is deleted (here: after its
    weights went), resume=auto must still find a whole step-4 (rm used to empty it in place, file by file, and
    then crash on it: FileNotFoundError ... pytorch_model.bin)."""
    out = copy_of(killed_run, tmp_path)
    shutil.rmtree(out / "checkpoints" / "step-6")
    real = shutil.rmtree

    def killed_midway(path, *args, **kwargs):
        path = Path(path)
        if "step-4" in path.name and (path / WEIGHTS).is_file():
            (path / WEIGHTS).unlink()
            raise Killed
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", killed_midway)
    with pytest.raises(Killed):
        main(config(out, f"train.resume={out / 'checkpoints' / 'step-2'}"))
    monkeypatch.setattr(shutil, "rmtree", real)

    result = main(config(out, "train.resume=auto"))
    assert result["train"]["resumed_from"] == str(out / "checkpoints" / "step-4")
    assert same(load_file(out / "checkpoints" / "step-6" / WEIGHTS), killed_run[1])
    assert not list((out / "checkpoints").glob(".partial-*"))  # the aside is cleared by the next save


def test_a_diverged_model_is_never_checkpointed_and_never_exported(tmp_path, monkeypatch, capsys):
    """Weights set to inf in step 3's forward: steps 3-6 are skipped as non-finite and the run stops. No
    checkpoint holds the broken weights and save_total_limit=2 keeps step-1 and step-2, the last finite ones (rm
    used to keep step-5 and step-6, non-finite, and export them with exit code 0)."""
    calls = [0]

    def blow_up(model, batch, *length):
        calls[0] += 1
        if calls[0] == 3:
            with torch.no_grad():
                next(model.parameters()).fill_(float("inf"))
        return group_outputs(model, batch, *length)

    monkeypatch.setattr(rm.training.loop, "group_outputs", blow_up)
    out = tmp_path / "run"
    limits = ["train.save_steps=1", "train.save_total_limit=2", "train.max_nonfinite=4"]
    with pytest.raises(TrainingError, match="stopping at step 6"):
        main(config(out, *limits))
    assert [s for s, _ in RunDir(out).complete_checkpoints()] == [1, 2]
    assert cli(["export", str(out), "--out", str(tmp_path / "export")]) == 0  # step 2's, finite
    capsys.readouterr()

    # A checkpoint that holds non-finite weights (as an rm before this kept them) is refused in one line.
    diverged = out / "checkpoints" / "step-7"
    shutil.copytree(out / "checkpoints" / "step-2", diverged)
    weights = load_file(diverged / WEIGHTS)
    save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()}, diverged / WEIGHTS)
    (diverged / MARKER).unlink()
    seal(diverged, 7)
    assert cli(["export", str(diverged), "--out", str(tmp_path / "nan-export")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the weights of step 7 are not finite" in err
    assert not (tmp_path / "nan-export").exists()


def test_train_log_holds_null_never_nan_for_a_skipped_interval(tmp_path, monkeypatch):
    """Every micro-batch of steps 3-4 has a NaN loss: their log row (log_steps=2) has no loss to show."""
    count = [0]

    def nan_in_steps_3_4(*args, **kwargs):
        count[0] += 1
        value, weight = training_loss(*args, **kwargs)
        return (value * float("nan") if count[0] in (3, 4) else value), weight

    monkeypatch.setattr(rm.training.loop, "training_loss", nan_in_steps_3_4)
    main(config(tmp_path / "run", "train.save_steps=0"))
    text = (tmp_path / "run" / "train_log.jsonl").read_text()
    rows = [json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in train_log.jsonl")) for line in
            text.splitlines()]  # fmt: skip
    assert [r["step"] for r in rows] == [2, 4, 6]
    assert rows[1]["loss"] is None and rows[1]["train_accuracy"] is None and rows[1]["nonfinite_skipped"] == 2
    assert rows[0]["loss"] is not None and "nonfinite_skipped" not in rows[0] and rows[2]["loss"] is not None
