"""Sweeps end to end on tiny runs: a grid sweep killed with SIGKILL and restarted accounts for every
trial once; trials in child processes report their evals and a crash is recorded with its log; the
pruner, the recovery of dead trials and the results table checked on studies built by hand."""

import csv
import itertools
import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from conftest import REPO, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config
from rm.sweep.config import load_sweep
from rm.sweep.study import HOST, RETRY_OF, _alive, open_study, recover, resolve, tally
from rm.sweep.sweep_report import rows, write_reports
from rm.sweep.trial import PRUNED_AT, last_error, make_reporter

optuna.logging.set_verbosity(optuna.logging.WARNING)
QUICKSTART = REPO / "configs" / "quickstart.yaml"
TINY = [  # a run of a few seconds: 6 optimizer steps, evals at steps 2 and 4 (and the final one at 6)
    "data.synthetic.n_train=120",
    "data.synthetic.n_eval=30",
    *TINY_MODEL,
    "collator.max_length=128",
    "train.batch_size=8",
    "train.eval_batch_size=16",
    "train.max_steps=6",
    "train.eval_steps=2",
    "train.log_steps=2",
    "train.report_to=[]",
    "export.enabled=false",
    "train.num_threads=1",  # tiny matrices: one thread is ~10x faster than two on a busy 2-core machine
]
GRID = {"train.lr": [1e-3, 3e-3], "loss.center_rewards_coef": [0.0, 0.01]}


def sweep_file(tmp_path, **keys) -> object:
    raw = {"base": str(QUICKSTART), "overrides": TINY, "sweep_dir": str(tmp_path / "sweep"), "sampler": "grid"}
    raw |= {"pruning": {"pruner": "none"}, "space": GRID} | keys
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def study_of(path):
    sweep = resolve(path, load_sweep(path))
    return sweep, optuna.load_study(study_name=sweep.name, storage=sweep.storage_url)


def test_dry_run_prints_each_grid_command_and_writes_nothing(tmp_path, capsys):
    launcher = tmp_path / "cpu.yaml"
    launcher.write_text("distributed_type: 'NO'\nnum_processes: 1\nuse_cpu: true\n")
    path = sweep_file(tmp_path, launcher=str(launcher))
    assert cli(["sweep", str(path), "--dry-run"]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if "-m rm train" in line]
    assert len(commands) == 4
    assert all(c.startswith(f"accelerate launch --config_file {launcher} -m rm train {QUICKSTART} ") for c in commands)
    drawn = [tuple(next(w.split("=")[1] for w in c.split() if w.startswith(k + "=")) for k in GRID) for c in commands]
    assert sorted(drawn) == sorted((repr(a), repr(b)) for a, b in itertools.product(*GRID.values()))
    assert [c.split()[-1] for c in commands] == [f"output_dir={tmp_path}/sweep/trials/{n:04d}" for n in range(4)]
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_killed_grid_sweep_restarts_and_accounts_for_every_trial_once(tmp_path):
    """SIGKILL the sweep while its second trial runs (the first finished), start it again, and check
    that the four grid points each finished once, the killed trial is failed and rerun exactly once,
    and the files at the end agree with what each trial's run wrote."""
    path = sweep_file(tmp_path)
    cmd = [sys.executable, "-m", "rm", "sweep", str(path)]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    # Trial 1's log is opened once it is RUNNING with its owner recorded and trial 0 has finished.
    second_log, deadline = tmp_path / "sweep" / "trials" / "0001" / "sweep_trial.log", time.monotonic() + 240
    while not second_log.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert first.returncode == -signal.SIGKILL, (tmp_path / "first.log").read_text()[-2000:]

    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "marked failed (its sweep process" in again.stdout

    sweep, study = study_of(path)
    trials = study.get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    failed = [t for t in trials if t.state == TrialState.FAIL]
    grid = sorted(itertools.product(*GRID.values()))
    assert sorted(tuple(t.params[k] for k in GRID) for t in done) == grid  # each point finished once
    assert len(failed) == 1 and len(trials) == 5  # the killed one, and nothing else
    (killed,) = failed
    reruns = [t for t in trials if t.system_attrs.get(RETRY_OF) == killed.number]
    assert len(reruns) == 1 and reruns[0].state == TrialState.COMPLETE and reruns[0].params == killed.params
    assert killed.user_attrs["log"] == str(second_log) and second_log.is_file()  # the killed run's log is kept
    assert tally(study) == {"ended": 4, "interrupted": 1, "running": 0, "waiting": 0}

    for t in done:  # the objective is the run's own eval.json; the hook reported the periodic evals only
        run_dir = tmp_path / "sweep" / "trials" / f"{t.number:04d}"
        assert t.value == json.loads((run_dir / "eval.json").read_text())["overall"]["accuracy"]
        assert sorted(t.intermediate_values) == [2, 4]
        assert load_config(run_dir / "config.yaml").train.lr == t.params["train.lr"]

    with open(tmp_path / "sweep" / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [int(r["trial"]) for r in table] == [t.number for t in sorted(done, key=lambda t: (-t.value, t.number))] + [
        killed.number
    ]
    assert f"interrupted; rerun as trial {reruns[0].number}" in table[-1]["note"]
    md = (tmp_path / "sweep" / "results.md").read_text()
    assert md.count("| finished |") == 4 and md.count("| failed |") == 1

    best = max(done, key=lambda t: (t.value, -t.number))
    best_cfg = load_config(tmp_path / "sweep" / "best.yaml")
    trial_cfg = load_config(tmp_path / "sweep" / "trials" / f"{best.number:04d}" / "config.yaml")
    assert best_cfg.output_dir == "runs/tiny-best" and best_cfg == load_config(
        tmp_path / "sweep" / "trials" / f"{best.number:04d}" / "config.yaml",
        ["output_dir=runs/tiny-best", "export.enabled=true"],
    )
    assert not trial_cfg.export.enabled and best_cfg.export.enabled  # the winner's retraining exports
    assert trial_cfg.loss.center_rewards_coef == best.params["loss.center_rewards_coef"]
    assert (tmp_path / "sweep" / "objective.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_child_trial_reports_its_evals_to_the_study(tmp_path, monkeypatch):
    """`launch: subprocess`: the trial is `python -m rm sweep-trial` (a `train` that reports) in a child,
    which reports its periodic evals to the study through the RM_SWEEP_* variables; its output and
    command are recorded, the command as the `python -m rm train` that reruns it by hand."""
    monkeypatch.chdir(REPO)  # the child runs `python -m rm` from here
    path = sweep_file(tmp_path, space={"train.lr": [3e-3]}, launch="subprocess")
    assert cli(["sweep", str(path)]) == 0
    sweep, study = study_of(path)
    (trial,) = study.get_trials()
    assert trial.state == TrialState.COMPLETE and sorted(trial.intermediate_values) == [2, 4]
    run_dir = tmp_path / "sweep" / "trials" / "0000"
    assert trial.value == json.loads((run_dir / "eval.json").read_text())["overall"]["accuracy"]
    assert trial.user_attrs["command"].startswith(f"python -m rm train {QUICKSTART} ")
    log = (run_dir / "sweep_trial.log").read_text()
    assert log.startswith("$ python -m rm sweep-trial") and "held-out accuracy after 6 steps" in log
    assert not _alive(trial.user_attrs["child_pid"])


@pytest.mark.slow
def test_a_crashed_trial_is_recorded_with_its_log_and_spends_its_budget(tmp_path):
    """One grid point cannot run (no such eval split): it is failed with the error and the traceback
    in its log, the other finishes, and running the sweep again starts nothing."""
    path = sweep_file(tmp_path, space={"data.eval_split": ["test", "nosuch"]})
    assert cli(["sweep", str(path)]) == 0
    sweep, study = study_of(path)
    ok, crashed = sorted(study.get_trials(), key=lambda t: t.params["data.eval_split"] != "test")
    assert ok.state == TrialState.COMPLETE and crashed.state == TrialState.FAIL
    assert crashed.user_attrs["error"].startswith("DataError: ") and "nosuch" in crashed.user_attrs["error"]
    log = open(crashed.user_attrs["log"]).read()
    assert "Traceback" in log and "nosuch" in log
    (row,) = [r for r in rows(study, sweep) if r["trial"] == crashed.number]
    assert (
        row["state"] == "failed"
        and row["note"] == f"crashed: {crashed.user_attrs['error']}; log: {crashed.user_attrs['log']}"
    )
    assert tally(study)["ended"] == 2
    assert cli(["sweep", str(path)]) == 0 and len(study.get_trials()) == 2


def _study(tmp_path, **keys):
    path = sweep_file(tmp_path, **keys)
    sweep = resolve(path, load_sweep(path))
    return sweep, open_study(sweep, create=True)


def _result(accuracy, loss=0.5):
    return {"overall": {"accuracy": accuracy, "loss": loss}, "subsets": {}}


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_the_reporter_prunes_a_trial_below_the_median_at_the_same_step(tmp_path):
    sweep, study = _study(tmp_path, pruning={"pruner": "median", "startup_trials": 1})
    dist = {"train.lr": FloatDistribution(1e-4, 1e-2)}
    study.add_trial(
        create_trial(params={"train.lr": 1e-3}, distributions=dist, value=0.8, intermediate_values={2: 0.8})
    )
    good, weak = study.ask(), study.ask()
    make_reporter(good, sweep.cfg)(2, _result(0.9))  # above 0.8: goes on
    with pytest.raises(optuna.TrialPruned):
        make_reporter(weak, sweep.cfg)(2, _result(0.5))
    assert study._storage.get_trial(weak._trial_id).intermediate_values == {2: 0.5}
    assert study._storage.get_trial_user_attrs(weak._trial_id)[PRUNED_AT] == 2
    assert PRUNED_AT not in study._storage.get_trial_user_attrs(good._trial_id)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_recovery_requeues_a_dead_processes_trial_once_and_leaves_live_ones(tmp_path):
    sweep, study = _study(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for pid in (dead.pid, os.getpid()):
        trial = study.ask()
        trial.suggest_categorical("train.lr", GRID["train.lr"])
        trial.set_user_attr("host", HOST)
        trial.set_user_attr("pid", pid)
    orphan, live = study.get_trials()
    notes = recover(study)
    assert notes == [
        f"trial {orphan.number} marked failed (its sweep process {dead.pid} died); its parameters are queued again"
    ]
    assert recover(study) == []  # requeued once only
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {orphan.number: TrialState.FAIL, live.number: TrialState.RUNNING, 2: TrialState.WAITING}
    rerun = study.get_trials()[2]
    assert rerun.params == orphan.params and rerun.system_attrs[RETRY_OF] == orphan.number
    assert tally(study) == {"ended": 0, "interrupted": 1, "running": 1, "waiting": 1}


def test_results_are_best_first_for_either_direction_and_every_file_is_written(tmp_path):
    dist = {"train.lr": FloatDistribution(1e-4, 1e-2, log=True)}
    for metric, order in [("accuracy", [1, 0, 2, 3, 4]), ("loss", [0, 1, 3, 2, 4])]:
        sweep, study = _study(tmp_path / metric, objective={"metric": metric}, sampler="tpe", n_trials=5)
        for value in (0.6, 0.7):
            study.add_trial(create_trial(params={"train.lr": value / 100}, distributions=dist, value=value))
        for last in (0.65, 0.55):
            kw = {"intermediate_values": {2: last}, "state": TrialState.PRUNED}
            study.add_trial(create_trial(params={"train.lr": last / 100}, distributions=dist, **kw))
        kw = {"user_attrs": {"error": "exit code 1: boom", "log": "x.log"}, "state": TrialState.FAIL}
        study.add_trial(create_trial(params={"train.lr": 1e-3}, distributions=dist, **kw))
        table = rows(study, sweep)
        assert [r["trial"] for r in table] == order, metric
        assert table[-1]["note"] == "crashed: exit code 1: boom; log: x.log"
        paths = write_reports(study, sweep)
        assert set(paths) == {"csv", "md", "best", "plot"}
        assert load_config(paths["best"]).train.lr == pytest.approx(table[0]["train.lr"])
        assert load_config(paths["best"]).export.enabled  # even where the sweep's trials do not export
        assert paths["best"].read_text().startswith(f"# python -m rm train {paths['best']}\n")
        assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_trial_child_dies_with_its_sweep_process(tmp_path):
    """SIGKILL gives the sweep no chance to clean up: the kernel must take its trial child along."""
    parent = (
        "import subprocess, sys, time\n"
        "from rm.sweep.trial import die_with_parent\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], preexec_fn=die_with_parent)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    sweep = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO, stdout=subprocess.PIPE, text=True)
    child = int(sweep.stdout.readline())
    assert _alive(child)
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 100  # guards a hang only: the kernel kills it at once, well within the child's 120 s
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_a_crash_is_summed_up_by_the_runs_error_not_by_accelerates_wrapper(tmp_path):
    log = tmp_path / "sweep_trial.log"
    log.write_text(
        "$ accelerate launch -m rm train x.yaml\nerror: data.eval_split: no split 'nosuch' in /d\n"
        'Traceback (most recent call last):\n  File "launch.py", line 1\n'
        "subprocess.CalledProcessError: Command '[...]' returned non-zero exit status 2.\n\n"
    )
    assert last_error(log) == "error: data.eval_split: no split 'nosuch' in /d"
    log.write_text("Traceback (most recent call last):\nValueError: bad\n  (a note after it)\n")
    assert last_error(log) == "ValueError: bad"
    log.write_text("killed\n")
    assert last_error(log) == "killed"
