"""Faults a run must survive or explain: a non-finite loss skips its step (and only it), too many in a
row stop the run naming the step and the likely cause, and out-of-memory names the settings to lower."""

import json
import os
import signal

import pytest
import torch
from safetensors.torch import load_file

import rm.training.loop
from conftest import REPO, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config
from rm.errors import TrainingError
from rm.model.objective import training_loss
from rm.training.faults import oom_advice
from rm.training.run import main

QUICKSTART = REPO / "configs" / "quickstart.yaml"
SMALL = [
    "data.synthetic.n_train=96",
    "data.synthetic.n_eval=24",
    *TINY_MODEL,
    "train.batch_size=8",
    "train.eval_batch_size=24",
    "train.log_steps=1",
    "train.lr=3e-3",
    "train.report_to=[]",
    "train.num_threads=1",
]


def nan_at(calls: set[int]):
    """training_loss, but NaN on the given (1-based) micro-batch calls: a stand-in for a bad batch."""
    count = [0]

    def loss(*args, **kwargs):
        count[0] += 1
        value, weight = training_loss(*args, **kwargs)
        return (value * float("nan") if count[0] in calls else value), weight

    return loss


@pytest.mark.slow
def test_a_nonfinite_loss_skips_exactly_its_step(tmp_path, monkeypatch):
    """A constant learning rate makes the reference simple: a 6-step run whose 6th loss is NaN must end
    with exactly the weights of a clean 5-step run (the skipped step touched neither weights nor Adam)."""
    common = SMALL + ["train.scheduler=constant", "train.warmup_ratio=0", "train.eval_steps=0"]
    main(load_config(QUICKSTART, common + ["train.max_steps=5", f"output_dir={tmp_path / 'clean'}"]))
    monkeypatch.setattr(rm.training.loop, "training_loss", nan_at({6}))
    result = main(load_config(QUICKSTART, common + ["train.max_steps=6", f"output_dir={tmp_path / 'nan'}"]))

    assert result["train"]["nonfinite_skipped"] == 1 and result["train"]["steps"] == 6
    clean = load_file(tmp_path / "clean" / "export" / "model.safetensors")
    skipped = load_file(tmp_path / "nan" / "export" / "model.safetensors")
    assert all(torch.equal(clean[k], skipped[k]) for k in clean)
    log = [json.loads(line) for line in (tmp_path / "nan" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]
    assert all(r["loss"] == r["loss"] for r in log[:5])  # finite rows untouched by the NaN
    assert log[5]["loss"] is None and log[5]["nonfinite_skipped"] == 1  # null, never NaN (invalid JSON), nor 0


def test_nonfinite_losses_in_a_row_stop_the_run_naming_step_and_cause(tmp_path, monkeypatch):
    common = SMALL + ["train.max_steps=12", "train.max_nonfinite=3", "export.enabled=false"]
    # From step 4 on every loss is NaN: after 3 clean updates, so the learning rate is the suspect.
    monkeypatch.setattr(rm.training.loop, "training_loss", nan_at(set(range(4, 100))))
    with pytest.raises(TrainingError) as err:
        main(load_config(QUICKSTART, common + [f"output_dir={tmp_path / 'late'}"]))
    message = str(err.value)
    assert "stopping at step 6" in message and "steps 4-6" in message and "train.max_nonfinite=3" in message
    assert "learning rate is too high" in message and "train.lr=0.003" in message

    # NaN from the very first batch: before any update, so the data or the model, not the learning rate.
    monkeypatch.setattr(rm.training.loop, "training_loss", nan_at(set(range(1, 100))))
    with pytest.raises(TrainingError, match=r"stopping at step 3: .*before any update.*data inspect"):
        main(load_config(QUICKSTART, common + [f"output_dir={tmp_path / 'early'}"]))


def test_a_huge_learning_rate_is_caught_and_explained(tmp_path, capsys):
    """No patching: lr 1e30 blows the weights up after the first update; the CLI stops with exit code 1."""
    overrides = SMALL + ["train.max_steps=12", "train.lr=1e30", "train.warmup_ratio=0", "export.enabled=false"]
    code = cli(["train", str(QUICKSTART), *overrides, f"output_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 1
    assert "error: stopping at step" in err and "train.max_nonfinite=5" in err
    assert "learning rate is too high" in err and "train.lr=1e+30" in err
    assert not (tmp_path / "eval.json").exists()


def test_out_of_memory_names_the_settings_to_lower(tmp_path, monkeypatch):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(rm.training.loop, "group_outputs", oom)
    cfg = load_config(QUICKSTART, SMALL + ["train.max_steps=3", f"output_dir={tmp_path}"])
    with pytest.raises(TrainingError) as err:
        main(cfg)
    message = str(err.value)
    assert message.startswith("out of memory while training (optimizer step 1)")
    for knob in [
        "train.batch_size (now 8",
        "collator.max_tokens",
        f"collator.max_length (now {cfg.collator.max_length})",
    ]:
        assert knob in message
    assert "model.gradient_checkpointing=true" in message and "model.lora.r" in message
    assert "Tried to allocate 2.00 GiB" in message  # torch's own line is kept

    evaluation = oom_advice(cfg, "evaluation")
    assert "train.eval_batch_size (now 24)" in evaluation and "collator.eval_max_tokens" in evaluation
    checkpointing = load_config(QUICKSTART, ["model.gradient_checkpointing=true", "model.lora.r=8"])
    assert "gradient_checkpointing" not in oom_advice(checkpointing, "training")
    assert "model.lora.r" not in oom_advice(checkpointing, "training")


def sigint_at(batches: dict[int, int], seen: list):
    """An on_batch hook that sends this process `batches[n]` SIGINTs (Ctrl-C) after micro-batch n, and
    records train_log.jsonl's steps as they stand at every micro-batch."""
    count = [0]

    def on_batch(batch, loss, out):
        count[0] += 1
        log = out / "train_log.jsonl"
        seen.append([json.loads(r)["step"] for r in log.read_text().splitlines()] if log.exists() else None)
        for _ in range(batches.get(count[0], 0)):
            os.kill(os.getpid(), signal.SIGINT)

    return on_batch


def test_ctrl_c_saves_a_checkpoint_and_says_how_to_resume(tmp_path, capsys):
    """The first Ctrl-C acts as SIGTERM does: a checkpoint at the end of the step, the resume command.
    (on_batch runs after its step's stop check, so a Ctrl-C there is seen at the next step, 5.)"""
    seen = []
    cfg = load_config(QUICKSTART, SMALL + ["train.max_steps=8", f"output_dir={tmp_path}"])
    hook = sigint_at({4: 1}, seen)
    result = main(cfg, on_batch=lambda b, loss: hook(b, loss, tmp_path))
    out = capsys.readouterr().out
    assert result["interrupted"] and result["stopped_by"] == "SIGINT" and result["train"]["steps"] == 5
    assert (tmp_path / "checkpoints" / "step-5" / "trainer_state.json").is_file()
    assert "stopped by SIGINT after step 5" in out and "train.resume=auto" in out
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's handler is back
    # train_log.jsonl grows at every log step (log_steps=1), not only at the end.
    assert seen == [[], [1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]
    rows = [json.loads(r) for r in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]


def test_a_second_ctrl_c_stops_at_once(tmp_path, capsys, monkeypatch):
    cfg = load_config(QUICKSTART, SMALL + ["train.max_steps=8", "export.enabled=false", f"output_dir={tmp_path}"])
    hook = sigint_at({2: 2}, [])
    with pytest.raises(KeyboardInterrupt):
        main(cfg, on_batch=lambda b, loss: hook(b, loss, tmp_path))
    assert not (tmp_path / "checkpoints").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # From the command line: one line and exit code 130, not a traceback.
    import rm.training.run

    def interrupted(cfg, **hooks):
        raise KeyboardInterrupt

    monkeypatch.setattr(rm.training.run, "main", interrupted)
    capsys.readouterr()
    assert cli(["train", str(QUICKSTART), f"output_dir={tmp_path / 'cli'}"]) == 130
    assert capsys.readouterr().err.strip() == "error: interrupted (Ctrl-C)"


def long_and_short(folder, short_train: int, short_test: int):
    """train.jsonl and test.jsonl of prompt/chosen/rejected records: a few with one-word answers, the rest
    with answers of 60 words, which collator.max_length=16 cannot hold."""
    folder.mkdir()
    words = " ".join(f"w{i}" for i in range(60))
    for split, short in (("train", short_train), ("test", short_test)):
        rows = [{"prompt": f"q{i}?", "chosen": "yes", "rejected": "no"} for i in range(short)]
        rows += [{"prompt": f"q{i}?", "chosen": f"yes {words}", "rejected": f"no {words}"} for i in range(20)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [f"data.source={folder}", "collator.max_length=16"]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        # Some training pairs fit, no eval pair does: not a run that "succeeds" with `nan, n=0`.
        ("short train", "error: no eval pairs left after encoding (20 loaded"),
        ("no short", "error: no training pairs left after encoding (20 loaded"),
        (["train.max_steps=-5"], "train.max_steps: must be >= 0, got -5"),
        (["train.lr=-0.001"], "train.lr: must be >= 0, got -0.001"),
        (["train.report_to=[bogus]"], "train.report_to: unknown tracker 'bogus'"),
        (["train.report_to=[wandb]"], "train.report_to: wandb is not installed"),
    ],
)
@pytest.mark.slow
def test_runs_with_nothing_to_do_or_bad_settings_fail_in_one_line(tmp_path, capsys, overrides, says):
    if isinstance(overrides, str):
        overrides = long_and_short(tmp_path / "data", 3 if overrides == "short train" else 0, 0)
    code = cli(["train", str(QUICKSTART), *SMALL, "train.max_steps=2", *overrides, f"output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and says in err, err
    assert "Traceback" not in err and not (tmp_path / "run" / "eval.json").exists()


def test_report_to_may_be_one_name_and_eval_json_holds_no_bare_nan(tmp_path, monkeypatch):
    """TRL users write report_to=wandb: one name is a list of one. An undefined metric is written as
    null (valid JSON), not NaN."""
    import rm.training.run

    assert load_config(QUICKSTART, ["train.report_to=tensorboard"]).train.report_to == "tensorboard"
    real = rm.training.run.evaluate

    def with_nan(*args, **kwargs):
        result = real(*args, **kwargs)
        result["overall"]["mean_margin"] = float("nan")
        return result

    monkeypatch.setattr(rm.training.run, "evaluate", with_nan)
    overrides = SMALL[:-2] + ["train.report_to=tensorboard", "train.max_steps=1", "export.enabled=false"]
    main(load_config(QUICKSTART, overrides + [f"output_dir={tmp_path}"]))
    text = (tmp_path / "eval.json").read_text()
    assert "NaN" not in text
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))["overall"]["mean_margin"] is None
    assert list(tmp_path.rglob("events.out.tfevents.*"))


class InfiniteGradient(torch.autograd.Function):
    """Identity forward (the loss stays finite); an infinite gradient backward: a backward-pass overflow."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("inf")


@pytest.mark.slow
def test_a_nonfinite_gradient_with_a_finite_loss_skips_its_step(tmp_path, monkeypatch):
    """As for a NaN loss: a 6-step run whose 6th gradient is infinite ends with the weights of a clean 5-step
    run. The check is the norm clipping computes (train.max_grad_norm > 0, the default)."""
    common = SMALL + ["train.scheduler=constant", "train.warmup_ratio=0", "train.eval_steps=0"]
    main(load_config(QUICKSTART, common + ["train.max_steps=5", f"output_dir={tmp_path / 'clean'}"]))
    count = [0]

    def loss(*args, **kwargs):
        count[0] += 1
        value, weight = training_loss(*args, **kwargs)
        return (InfiniteGradient.apply(value) if count[0] == 6 else value), weight

    monkeypatch.setattr(rm.training.loop, "training_loss", loss)
    result = main(load_config(QUICKSTART, common + ["train.max_steps=6", f"output_dir={tmp_path / 'inf'}"]))
    assert result["train"]["nonfinite_skipped"] == 1 and result["train"]["steps"] == 6
    clean = load_file(tmp_path / "clean" / "export" / "model.safetensors")
    skipped = load_file(tmp_path / "inf" / "export" / "model.safetensors")
    assert all(torch.equal(clean[k], skipped[k]) for k in clean)
    log = [json.loads(line) for line in (tmp_path / "inf" / "train_log.jsonl").read_text().splitlines()]
    assert log[5]["loss"] == log[5]["loss"]  # the loss itself was finite


def test_a_stopped_run_exits_non_zero_and_its_export_says_it_did_not_finish(tmp_path, capsys, caplog, monkeypatch):
    """`rm train … && rm export …` after one Ctrl-C: train exits 130 (128 + SIGINT), so the chain stops; an
    export run anyway says the run has not finished, naming the step and the total, and --require-finished
    refuses it."""
    count = [0]

    def ctrl_c_at_step_3(*args, **kwargs):
        count[0] += 1
        if count[0] == 3:  # one micro-batch a step: seen at the end of step 3
            os.kill(os.getpid(), signal.SIGINT)
        return training_loss(*args, **kwargs)

    monkeypatch.setattr(rm.training.loop, "training_loss", ctrl_c_at_step_3)
    out, export = tmp_path / "run", tmp_path / "export"
    assert cli(["train", str(QUICKSTART), *SMALL, "train.max_steps=8", f"output_dir={out}"]) == 130
    assert "stopped by SIGINT after step 3" in capsys.readouterr().out

    assert cli(["export", str(out), "--out", str(export), "--require-finished"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {out} has not finished (its newest weights are step 3 of 8): finish it with "
        f"python -m rm train {out / 'config.yaml'} train.resume=auto"
    )
    assert not export.exists()
    assert cli(["export", str(out), "--out", str(export)]) == 0
    assert "(step 3 of 8: the run has not finished)" in caplog.text
