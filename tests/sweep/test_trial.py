"""A trial's child stopped by SIGTERM or Ctrl-C (it saved a checkpoint and exited 128 + the signal) is recorded
as interrupted and its parameters queued again, not counted as a crash that spends the sweep's budget."""

import optuna
import pytest
from optuna.trial import TrialState

import rm.sweep.trial
from rm.errors import TrialCrashed
from rm.sweep.study import RETRY_OF, tally
from rm.sweep.trial import run_child

optuna.logging.set_verbosity(optuna.logging.WARNING)


class Child:
    """Stands for the trial's `subprocess.Popen`: it writes `says` to its log and exits with `code`."""

    def __init__(self, code: int, says: str):
        self.code, self.says, self.pid = code, says, 12345

    def __call__(self, cmd, stdout, **kwargs):
        stdout.write(self.says)
        return self

    def wait(self) -> int:
        return self.code


@pytest.mark.parametrize(
    ("code", "says", "interrupted"),
    [
        (143, "stopped by SIGTERM after step 4 (1.0 s); checkpoint saved.\n", True),
        (1, "stopped by SIGINT after step 4 (1.0 s); checkpoint saved.\nCalledProcessError: …\n", True),  # launcher
        (1, "error: no training pairs left after encoding\n", False),
    ],
)
def test_an_interrupted_child_is_queued_again_not_counted_crashed(tmp_path, monkeypatch, code, says, interrupted):
    study = optuna.create_study()
    trial = study.ask({"train.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2)})
    monkeypatch.setattr(rm.sweep.trial.subprocess, "Popen", Child(code, says))
    with pytest.raises(TrialCrashed) as err:
        run_child(trial, None, ["python", "-m", "rm", f"output_dir={tmp_path / 'run'}"], "sqlite://", tmp_path / "log")
    study.tell(trial, state=TrialState.FAIL)  # as the driver records both
    queued = [t for t in study.get_trials() if t.system_attrs.get(RETRY_OF) == trial.number]
    if interrupted:
        assert str(err.value).startswith(f"interrupted (exit code {code})")
        assert len(queued) == 1 and queued[0].state == TrialState.WAITING and queued[0].params == trial.params
        assert tally(study) == {"ended": 0, "interrupted": 1, "running": 0, "waiting": 1}
    else:
        assert str(err.value) == "exit code 1: error: no training pairs left after encoding" and not queued
        assert tally(study) == {"ended": 1, "interrupted": 0, "running": 0, "waiting": 0}
