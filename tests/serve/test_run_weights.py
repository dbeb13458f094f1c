"""`rm serve RUN` of a run without an export says which weights it serves, as `rm export` does: an unfinished run's
newest checkpoint with one warning naming the step and the total (it used to be served without a word), and the
same words in /info. Weights that diverged (rewards that are not finite) are refused in one line, like `rm export`
refuses them: a checkpoint training marked diverged, and the end-of-run export of a run whose eval.json says so."""

import json
import logging
import shutil

import pytest
from serving import client

from conftest import stopped_run
from rm.cli import main as cli
from rm.config.rundir import STATE
from rm.errors import ExportError
from rm.serve.scorer import load_scorer
from rm.training.checkpoint_folder import seal


def scorer(name: str):
    return load_scorer(name, device="cpu", dtype="float32", trust_remote_code=False, max_length=0, normalize=False,
                       num_threads=1)  # fmt: skip


@pytest.fixture
def run(tokenizer, tmp_path):
    """A run stopped at step 16 of 400: config, tokenizer, one checkpoint (weights and trainer_state.json)."""
    return stopped_run(tokenizer, tmp_path / "run")


def test_an_unfinished_run_is_served_with_one_warning_and_says_so_in_info(run, caplog):
    with caplog.at_level(logging.WARNING, logger="rm.serve"):
        served = scorer(str(run))
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [f"serving {run / 'checkpoints' / 'step-16'} (step 16 of 400: the run has not finished)"]
    with client(served) as c:
        assert c.get("/info").json()["weights"] == "step 16 of 400: the run has not finished"


def test_diverged_weights_are_refused_in_one_line(run, exported_tiny, capsys):
    step = run / "checkpoints" / "step-16"
    (step / STATE).write_text(json.dumps({"step": 16, "max_steps": 400, "diverged": "48 of 48 outputs are not finite"}))
    (step / "complete.json").unlink()
    seal(step, 16)
    with pytest.raises(ExportError) as refused:
        scorer(str(run))
    assert str(refused.value) == (
        f"{run / 'checkpoints' / 'step-16'}: the run diverged at step 16: 48 of 48 outputs are not finite; "
        "no checkpoint of the run holds good weights"
    )

    # An older rm exported a diverged run: eval.json's mean rewards are null, the export loads as any other.
    shutil.copytree(exported_tiny, run / "export")
    overall = {"n": 24, "accuracy": 0.25, "mean_margin": None, "mean_chosen_reward": None, "mean_rejected_reward": None}
    (run / "eval.json").write_text(json.dumps({"overall": overall, "subsets": {}, "train": {"steps": 16}}))
    with pytest.raises(ExportError, match=r"export: the run diverged: its eval.json's mean rewards are not finite"):
        scorer(str(run))
    assert cli(["export", str(run), "--out", str(run.parent / "again")]) == 2
    assert "the run diverged at step 16: its eval.json's mean rewards are not finite" in capsys.readouterr().err
