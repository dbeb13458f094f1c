"""What `python -m rm sweep` prints: its own lines, not Optuna's `[I ...]` log lines."""

import logging

import optuna
import yaml

import rm.sweep.driver
from conftest import REPO
from rm.cli import main as cli


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_a_sweep_prints_no_optuna_info_lines(tmp_path, monkeypatch, capsys):
    def stand_in(trial, *args) -> dict:  # a trial that trains nothing (as tests/sweep/stand_in.py)
        return {"overall": {"accuracy": trial.params["train.lr"], "loss": 1.0}, "subsets": {}}

    monkeypatch.setattr(rm.sweep.driver, "run_in_process", stand_in)
    raw = {"base": str(REPO / "configs" / "quickstart.yaml"), "sweep_dir": str(tmp_path / "sweep"), "sampler": "grid"}
    raw |= {"pruning": {"pruner": "none"}, "space": {"train.lr": [1e-3, 3e-3]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    seen = Records()
    logger = logging.getLogger("optuna")
    logger.addHandler(seen)
    optuna.logging.set_verbosity(optuna.logging.INFO)  # Optuna's default, which other tests turn down
    try:
        assert cli(["sweep", str(tmp_path / "s.yaml")]) == 0
    finally:
        logger.removeHandler(seen)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert "| finished |" in capsys.readouterr().out  # the sweep ran both trials and printed its table
    assert [r.getMessage() for r in seen.records if r.levelno < logging.WARNING] == []
