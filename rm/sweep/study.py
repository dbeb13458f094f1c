"""A sweep's Optuna study: where it is stored, how it is opened or continued, and what became of its trials.

A restarted sweep continues where it stopped. Finished trials are kept. A trial whose sweep process
died (SIGKILL, a lost machine) is marked failed and its parameters are queued again as a new trial
that notes what it reruns: found by process id on the same host at once, on other hosts when its
heartbeat stops (Optuna's RDB heartbeat, every `heartbeat_interval` s; stale after `heartbeat_grace` s).
`n_trials` counts trials that reached an end (finished, pruned, crashed), so interrupted ones are rerun
without growing the sweep and a crash is not retried forever.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from rm.config import build
from rm.errors import ConfigError
from rm.sweep import storage
from rm.sweep.config import ObjectiveConfig, PruningConfig, SweepConfig, direction, override
from rm.sweep.storage import masked, sqlite_file

HOST = socket.gethostname()
RETRY_OF = "rm_retry_of"  # system attr of a trial queued again: the number of the trial it reruns
SKIPPED = "rm_skipped"  # user attr of a trial taken but not run (rm/sweep/budget.py): why; left out of tallies


@dataclass
class Sweep:
    """A sweep config with what is derived from its file: the study name, directory and storage URL."""

    cfg: SweepConfig
    name: str
    dir: Path
    storage_url: str

    @property
    def shown_url(self) -> str:
        """The storage URL to print: every credential in it masked (logs and terminals are shared)."""
        return masked(self.storage_url)


def resolve(path: str | Path, cfg: SweepConfig, storage: str = "") -> Sweep:
    stem = Path(path).stem
    sweep_dir = Path(cfg.sweep_dir or f"runs/sweeps/{stem}")
    url = storage or cfg.storage or f"sqlite:///{(sweep_dir / 'study.db').resolve()}"
    return Sweep(cfg, cfg.study_name or stem, sweep_dir, url)


def open_storage(url: str, heartbeat: bool = True, cfg: SweepConfig | None = None) -> optuna.storages.RDBStorage:
    """The study's storage; with `heartbeat` (a sweep process) its trials beat as `cfg` says, stale ones requeued."""
    if not heartbeat:
        return storage.open_storage(url)
    cfg = cfg or SweepConfig()
    return storage.open_storage(url, cfg.heartbeat_interval, cfg.heartbeat_grace, requeue)


def make_sampler(cfg: SweepConfig, seed: int) -> optuna.samplers.BaseSampler:
    """The sampler of new trials. A grid's trials are all queued with their values (rm/sweep/budget.py),
    so it asks none; Optuna's GridSampler would draw points per process and stop the study itself."""
    if cfg.sampler in ("grid", "random"):
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def make_pruner(cfg: SweepConfig) -> optuna.pruners.BasePruner:
    if cfg.pruning.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(cfg.pruning.startup_trials, cfg.pruning.warmup_steps)


def grid_size(cfg: SweepConfig) -> int:
    return math.prod(len(s.values) for s in cfg.space.values())


def trial_budget(cfg: SweepConfig) -> int:
    """Trials to bring to an end: n_trials, at most the grid's size for a grid (0: the whole grid)."""
    return min(cfg.n_trials or grid_size(cfg), grid_size(cfg)) if cfg.sampler == "grid" else cfg.n_trials


def open_study(sweep: Sweep, create: bool, read_only: bool = False) -> optuna.Study:
    """Create or continue the study; refuse one made from a different base, overrides, space or objective.

    `read_only` (for reports) takes those four from the study instead, so the file's overrides need not match.
    """
    cfg = sweep.cfg
    missing = f"no study {sweep.name!r} in {sweep.shown_url}: start it once without --worker"
    if create:
        sweep.dir.mkdir(parents=True, exist_ok=True)
    elif (db := sqlite_file(sweep.storage_url)) is not None and not db.is_file():
        raise ConfigError(missing)  # rather than an empty database file made by opening it
    rdb = open_storage(sweep.storage_url, cfg=cfg)
    if create:
        study = optuna.create_study(study_name=sweep.name, storage=rdb, direction=direction(cfg), load_if_exists=True)
    else:
        try:
            study = optuna.load_study(study_name=sweep.name, storage=rdb)
        except KeyError:
            raise ConfigError(missing) from None
    keys = ("base", "overrides", "objective", "space")
    identity = json.loads(json.dumps({k: dataclasses.asdict(cfg)[k] for k in keys}))
    saved = study.user_attrs.get("rm_sweep")
    if read_only and saved is not None:
        sweep.cfg = dataclasses.replace(
            cfg, **{k: getattr(build(SweepConfig, saved, "the study's sweep"), k) for k in keys}
        )
        return study
    if saved is None:
        study.set_user_attr("rm_sweep", identity)
    elif saved != identity:
        changed = sorted(k for k in identity if identity[k] != saved.get(k))
        raise ConfigError(
            f"study {sweep.name!r} in {sweep.shown_url} was started with a different {', '.join(changed)}: "
            "its trials would not compare; set another study_name or sweep_dir to start afresh"
        )
    # What a trial's child needs to report and prune (rm.sweep.trial.reporter_from_env), as of this start.
    study.set_user_attr("rm_pruning", dataclasses.asdict(cfg.pruning))
    study.pruner = make_pruner(cfg)
    # A restarted (or second) process must not redraw the random points already drawn: offset the seed.
    study.sampler = make_sampler(cfg, cfg.seed + len(study.trials) + (os.getpid() if not create else 0))
    return study


def load_study_for_trial(url: str, name: str) -> tuple[optuna.Study, SweepConfig]:
    """The study as a trial's child process sees it: enough to report evals and ask the pruner."""
    study = optuna.load_study(study_name=name, storage=open_storage(url, heartbeat=False))
    saved = study.user_attrs["rm_sweep"]
    cfg = SweepConfig(
        objective=ObjectiveConfig(**saved["objective"]), pruning=PruningConfig(**study.user_attrs["rm_pruning"])
    )
    study.pruner = make_pruner(cfg)
    return study, cfg


def requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Queue an interrupted trial's parameters again as a new trial (a fresh run) that names the one it reruns."""
    keep = {k: v for k, v in trial.system_attrs.items() if k in ("grid_id", "search_space")}
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            system_attrs=keep | {RETRY_OF: trial.number},
        )
    )


def _alive(pid: int | None) -> bool:
    """Whether process `pid` of this host still runs (a zombie, killed but not yet reaped, does not)."""
    if pid is None:
        return True  # unknown owner: leave it to the heartbeat
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: state is the field after "(command)"
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def recover(study: optuna.Study) -> list[str]:
    """Fail this host's RUNNING trials whose sweep process is gone, and queue every interrupted trial again."""
    notes = []
    trials = study.get_trials(deepcopy=False)
    retried = {t.system_attrs.get(RETRY_OF) for t in trials}
    for t in trials:
        if t.number in retried:
            continue
        owner = t.user_attrs.get("pid")
        if t.state == TrialState.RUNNING and t.user_attrs.get("host") == HOST and not _alive(owner):
            try:
                study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another process got there first
            why = f"its sweep process {owner} died"
        elif t.state == TrialState.FAIL and t.user_attrs.get("interrupted"):
            why = "it was interrupted"
        else:
            continue
        requeue(study, t)
        notes.append(f"trial {t.number} marked failed ({why}); its parameters are queued again")
    fail_stale(study)
    return notes


def fail_stale(study: optuna.Study) -> None:
    """Fail (and requeue, by the storage's callback) trials of any host whose heartbeat is older than the grace."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def kept_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's trials less the skipped ones (taken but never run, rm/sweep/budget.py): what tallies,
    queues and reports count."""
    return [t for t in study.get_trials(deepcopy=False) if SKIPPED not in t.user_attrs]


def tally(study: optuna.Study) -> dict[str, int]:
    """Trials by fate: ended (finished, pruned, crashed: these spend n_trials), interrupted, running, waiting.

    Skipped trials (taken but never run, rm/sweep/budget.py) are in none of them."""
    trials = kept_trials(study)
    retried = {t.system_attrs.get(RETRY_OF) for t in trials}
    out = dict.fromkeys(("ended", "interrupted", "running", "waiting"), 0)
    for t in trials:
        if t.state == TrialState.FAIL and (t.number in retried or t.user_attrs.get("interrupted")):
            out["interrupted"] += 1
        elif t.state.is_finished():
            out["ended"] += 1
        else:
            out["running" if t.state == TrialState.RUNNING else "waiting"] += 1
    return out


def trial_overrides(sweep: Sweep, params: dict, number: int) -> list[str]:
    """The run overrides of trial `number`: the sweep's, the swept values, then its own output_dir (last)."""
    out = sweep.dir / "trials" / f"{number:04d}"
    return sweep.cfg.overrides + [override(k, v) for k, v in params.items()] + [f"output_dir={out}"]
