"""A sweep judged by a group metric, a suite's score or an attribute's fit: checked against the base run before
the first trial, read from each trial's eval.json with the right direction, shown in the results beside the
other numbers the trials have, and one line naming what eval.json holds when it lacks the chosen one."""

import csv
import math

import optuna
import pytest
import yaml

import rm.sweep.driver
from conftest import REPO
from rm.cli import main as cli
from rm.errors import ConfigError
from rm.sweep.config import direction, load_sweep
from rm.sweep.sweep_metric import MissingMetric, read_metric

optuna.logging.set_verbosity(optuna.logging.WARNING)
QUICKSTART = REPO / "configs" / "quickstart.yaml"
GROUPS = ["data.source=groups.jsonl", "data.eval_split="]  # not pairs only: a file of any format
SUITE = ["train.eval_suites=[{suite: rewardbench2}]"]
ATTRIBUTE = ["model.head.attributes=[length]"]


def sweep_file(tmp_path, metric: str, overrides=(), **keys):
    raw = {"base": str(QUICKSTART), "overrides": list(overrides), "sweep_dir": str(tmp_path / "sweep")}
    raw |= {"sampler": "grid", "pruning": {"pruner": "none"}, "space": {"train.lr": [1e-3, 2e-3, 3e-3]}}
    raw |= {"objective": {"metric": metric}} | keys
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "metric, overrides, want",
    [
        ("kendall_tau", GROUPS, "maximize"),
        ("top1_accuracy", GROUPS, "maximize"),
        ("best_of_k_accuracy", GROUPS, "maximize"),
        ("suite:rewardbench2", SUITE, "maximize"),
        ("suite:rewardbench2:Ties", SUITE, "maximize"),
        ("attribute:length:rmse", ATTRIBUTE, "minimize"),
        ("attribute:length:spearman", ATTRIBUTE, "maximize"),
        ("loss", [], "minimize"),
        ("ece", [], "minimize"),
    ],
)
def test_each_metric_loads_with_its_default_direction(tmp_path, metric, overrides, want):
    assert direction(load_sweep(sweep_file(tmp_path, metric, overrides))) == want


@pytest.mark.parametrize(
    "metric, overrides, subset, fragment",
    [
        ("kendall_tau", [], "", r"kendall_tau ranks groups of K responses, but the base run's data is pairs \(data"),
        ("top1_accuracy", ["data.source=x.jsonl", "data.format=hh"], "", r"pairs \(data\.format=hh"),
        ("suite:rewardbench2", [], "", r"train\.eval_suites has no 'rewardbench2' \(has: none\)"),
        ("suite:rm-bench", SUITE, "", r"has no 'rm-bench' \(has: rewardbench2\)"),
        ("suite:rewardbench2", SUITE, "helpful", r"objective\.subset: a suite's score has no eval subsets"),
        ("attribute:length:rmse", [], "", r"model\.head\.attributes has no 'length' \(has: none\)"),
        ("attribute:length:r2", ATTRIBUTE, "", r"'attribute:length:r2' is not one of .*attribute:<name>:<rmse\|"),
        ("kendall", [], "", r"objective\.metric: 'kendall' is not one of accuracy, loss, ece, top1_accuracy"),
    ],
)
def test_a_metric_the_base_run_cannot_have_is_refused_before_any_trial(tmp_path, metric, overrides, subset, fragment):
    path = sweep_file(tmp_path, metric, overrides, objective={"metric": metric, "subset": subset})
    with pytest.raises(ConfigError, match=fragment):
        load_sweep(path)


RESULT = {
    "overall": {"accuracy": 0.8, "loss": 0.4, "n": 30, "groups": 10, "top1_accuracy": 0.7, "kendall_tau": None},
    "subsets": {"even": {"accuracy": 0.9, "n": 12, "groups": 4, "top1_accuracy": 0.5, "kendall_tau": 0.25}},
    "suites": {"rm-bench": {"step": 6, "score": 0.6, "sections": {"chat": {"hard": 0.1, "average": 0.5}}}},
    "attributes": {"length": {"overall": {"rmse": 2.0, "pearson": 0.3}, "subsets": {"even": {"rmse": 1.5}}}},
}


def test_read_metric_reads_each_kind_and_names_what_there_is_when_one_is_missing():
    assert read_metric(RESULT, "top1_accuracy") == 0.7
    assert read_metric(RESULT, "kendall_tau", "even") == 0.25
    assert math.isnan(read_metric(RESULT, "kendall_tau"))  # undefined (null in eval.json): the trial fails
    assert read_metric(RESULT, "suite:rm-bench") == 0.6
    assert read_metric(RESULT, "suite:rm-bench:chat/hard") == 0.1
    assert read_metric(RESULT, "attribute:length:rmse", "even") == 1.5
    with pytest.raises(MissingMetric) as e:
        read_metric(RESULT, "suite:rewardbench2")
    message = str(e.value)
    assert "\n" not in message and message.startswith("objective.metric: the run's eval.json has no suite:rewardbench2")
    assert message.endswith(
        "it has: accuracy, loss, top1_accuracy, kendall_tau, suite:rm-bench, suite:rm-bench:chat/hard, "
        "suite:rm-bench:chat/average, attribute:length:rmse, attribute:length:pearson"
    )


def stand_in(trial, *args) -> dict:
    """A trial that trains nothing (as tests/sweep/stand_in.py), of groups scored on a suite: the higher the
    learning rate, the better the suite's score and the worse the Kendall tau."""
    lr = trial.params["train.lr"]
    overall = {"accuracy": 0.5, "loss": 0.7, "n": 40, "groups": 12, "top1_accuracy": 0.4}
    overall |= {"best_of_k_accuracy": 0.3, "kendall_tau": 1 - lr * 100}
    suite = {"step": 6, "score": lr * 100, "sections": {"Ties": 0.5}}
    return {"overall": overall, "subsets": {}, "suites": {"rewardbench2": suite}}


def test_a_sweep_on_a_suite_score_ranks_by_it_and_shows_the_other_numbers(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rm.sweep.driver, "run_in_process", stand_in)
    assert cli(["sweep", str(sweep_file(tmp_path, "suite:rewardbench2", SUITE))]) == 0
    with open(tmp_path / "sweep" / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [float(r["train.lr"]) for r in table] == [3e-3, 2e-3, 1e-3]  # maximised
    head = list(table[0])
    assert head[head.index("last_eval") + 1 :][:6] == [
        "suite:rewardbench2", "accuracy", "top1_accuracy", "best_of_k_accuracy", "kendall_tau", "train.lr"
    ]  # fmt: skip
    for r in table:
        assert float(r["suite:rewardbench2"]) == pytest.approx(float(r["objective"]))
        assert float(r["kendall_tau"]) == pytest.approx(1 - float(r["train.lr"]) * 100)
    md = (tmp_path / "sweep" / "results.md").read_text()
    assert "maximize eval suite:rewardbench2" in md and "| suite:rewardbench2 | accuracy | top1_accuracy |" in md


def test_a_metric_the_trials_eval_lacks_stops_the_sweep_in_one_line(tmp_path, monkeypatch, capsys):
    """The base run names the attribute, but its eval.json has no attributes block: one line naming what it has."""
    monkeypatch.setattr(rm.sweep.driver, "run_in_process", stand_in)
    assert cli(["sweep", str(sweep_file(tmp_path, "attribute:length:pearson", ATTRIBUTE))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: objective.metric: the run's eval.json has no attribute:length:pearson; it has: ")
    assert "suite:rewardbench2" in err and "\n" not in err
