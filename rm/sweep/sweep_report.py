"""What a sweep leaves behind: the results table (CSV and markdown, best first), the best run config
as a ready YAML, and a plot of the objective against each swept parameter.

Every trial the study holds gets a row, whatever became of it, so nothing run is hidden: an
interrupted trial says which trial reran it, a crashed one its error and log. Trials taken but never
run (skipped by rm/sweep/budget.py: over n_trials, or a grid point already held) are left out.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from rm.config import load_config, to_dict
from rm.config.atomic import write_bytes, write_text
from rm.errors import ConfigError
from rm.sweep.config import direction, objective_name
from rm.sweep.study import RETRY_OF, Sweep, kept_trials, trial_overrides
from rm.sweep.trial import PRUNED_AT

METRICS = "metrics"
"""A finished trial's user attr: its eval.json's numbers for the table (rm/sweep/sweep_metric.py's `shown_metrics`):
the objective's metric by name, accuracy, the group metrics of K responses, each suite's score."""
STATES = {TrialState.COMPLETE: "finished", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}
STATES |= {TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}


def _last_eval(t: FrozenTrial) -> tuple[int, float] | None:
    return (t.last_step, t.intermediate_values[t.last_step]) if t.intermediate_values else None


def ordered(study: optuna.Study, maximize: bool) -> list[FrozenTrial]:
    """Best first: finished trials by objective, then pruned ones by their last eval, then the rest by number."""
    sign = -1.0 if maximize else 1.0

    def key(t: FrozenTrial) -> tuple:
        group = [TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING, TrialState.WAITING]
        value = t.value if t.state == TrialState.COMPLETE else (_last_eval(t) or (0, math.nan))[1]
        value = sign * value if value is not None and not math.isnan(value) else math.inf
        return group.index(t.state), value if t.state in (TrialState.COMPLETE, TrialState.PRUNED) else 0, t.number

    return sorted(kept_trials(study), key=key)


def rows(study: optuna.Study, sweep: Sweep) -> list[dict]:
    trials = ordered(study, direction(sweep.cfg) == "maximize")
    rerun_as = {t.system_attrs[RETRY_OF]: t.number for t in trials if RETRY_OF in t.system_attrs}
    columns = list(dict.fromkeys(k for t in trials for k in t.user_attrs.get(METRICS, {})))  # those trials have
    out = []
    for t in trials:
        notes = []
        if RETRY_OF in t.system_attrs:
            notes.append(f"rerun of trial {t.system_attrs[RETRY_OF]}")
        if t.number in rerun_as:
            notes.append(f"interrupted; rerun as trial {rerun_as[t.number]}; log: {t.user_attrs.get('log')}")
        elif t.state == TrialState.FAIL:
            notes.append(f"crashed: {t.user_attrs.get('error', 'no error recorded')}; log: {t.user_attrs.get('log')}")
        if PRUNED_AT in t.user_attrs:
            notes.append(f"pruned at step {t.user_attrs[PRUNED_AT]}")
        last = _last_eval(t)
        ended = t.datetime_complete if t.number not in rerun_as else None  # not when the restart noticed
        seconds = (ended - t.datetime_start).total_seconds() if ended and t.datetime_start else None
        row = {
            "trial": t.number,
            "state": STATES.get(t.state, t.state.name.lower()),
            "objective": t.value if t.state == TrialState.COMPLETE else None,
            "last_eval": f"{last[1]:.4f} @ step {last[0]}" if last else "",
        }
        row |= {name: t.user_attrs.get(METRICS, {}).get(name) for name in columns}
        row |= {key: t.params.get(key) for key in sweep.cfg.space}
        row |= {"seconds": round(seconds, 1) if seconds is not None else None, "note": "; ".join(notes)}
        row["output_dir"] = t.user_attrs.get("output_dir", "")
        out.append(row)
    return out


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-3 or abs(value) >= 1e4 else f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value).replace("|", "\\|")


def markdown(table: list[dict], sweep: Sweep) -> str:
    head = list(table[0]) if table else ["trial"]
    lines = [
        f"sweep {sweep.name}: {direction(sweep.cfg)} {objective_name(sweep.cfg)}, best first",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    fixed = {"objective": lambda v: f"{v:.4f}" if v is not None else ""}  # values compared down the column
    lines += ["| " + " | ".join(fixed.get(k, _cell)(r[k]) for k in head) + " |" for r in table]
    return "\n".join(lines) + "\n"


def best_yaml(study: optuna.Study, sweep: Sweep, path: Path) -> bool:
    """The best finished trial's run config with a fresh output_dir, ready for `python -m rm train`."""
    done = [t for t in kept_trials(study) if t.state == TrialState.COMPLETE]
    if not done:
        return False
    best = study.best_trial
    trial = trial_overrides(sweep, best.params, best.number)[:-1]
    # Trials usually skip the export (the shipped sweeps set export.enabled=false); the winner's retraining
    # is the run whose model is wanted, so it exports.
    overrides = trial + ["export.enabled=true", f"output_dir=runs/{sweep.name}-best"]
    cfg = load_config(sweep.cfg.base, overrides)
    header = (
        f"# python -m rm train {path}\n"
        f"# Best of sweep {sweep.name}: trial {best.number}, {objective_name(sweep.cfg)} = {best.value:.4f} "
        f"(its run: {best.user_attrs.get('output_dir', '?')}).\n"
        f"# {sweep.cfg.base} with: {' '.join(trial)}; export.enabled=true, so retraining it exports the model\n"
    )
    write_text(path, header + yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return True


def plot(study: optuna.Study, sweep: Sweep, path: Path) -> None:
    """One panel per swept key: each finished trial's objective (dots), pruned ones' last eval (rings), best (star)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    cfg = sweep.cfg
    trials = kept_trials(study)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == TrialState.PRUNED and t.intermediate_values]
    best = study.best_trial if done else None
    keys = list(cfg.space)
    fig, axes = plt.subplots(1, len(keys), figsize=(max(6.0, 4.2 * len(keys)), 4.0), squeeze=False, sharey=True)
    for ax, key in zip(axes[0], keys, strict=True):
        spec = cfg.space[key]
        categorical = bool(spec.values) and not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in spec.values
        )

        def x(t: FrozenTrial, key: str = key, spec=spec, categorical: bool = categorical) -> float:
            return spec.values.index(t.params[key]) if categorical else t.params[key]

        has = [t for t in done if key in t.params]
        cut = [t for t in pruned if key in t.params]
        ax.scatter([x(t) for t in has], [t.value for t in has], color="tab:blue", label="finished", zorder=3)
        ax.scatter(
            [x(t) for t in cut],
            [_last_eval(t)[1] for t in cut],
            facecolors="none",
            edgecolors="grey",
            label="pruned (last eval)",
            zorder=2,
        )
        if best is not None and key in best.params:
            ax.scatter([x(best)], [best.value], marker="*", s=220, color="tab:orange", label="best", zorder=4)
        if categorical:
            ax.set_xticks(range(len(spec.values)), [str(v) for v in spec.values])
        elif spec.log or (spec.values and min(spec.values) > 0 and max(spec.values) / min(spec.values) >= 20):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # 2x10^-4 3x10^-4 … overlap
        if spec.values and not categorical:  # a grid: tick exactly the values tried
            ax.set_xticks(spec.values, [_cell(float(v)) for v in spec.values])
            ax.minorticks_off()
        ax.set_xlabel(key)
        ax.margins(x=0.1, y=0.1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(objective_name(cfg))
    axes[0][-1].legend(fontsize=8, loc="best")
    title = f"sweep {sweep.name}: {len(done)} finished, {len(pruned)} pruned"
    fig.suptitle(title + (f"\nbest: trial {best.number} = {best.value:.4f}" if best else ""), fontsize=10)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    write_bytes(path, png.getvalue())


def write_reports(study: optuna.Study, sweep: Sweep) -> dict[str, Path]:
    """results.csv, results.md, best.yaml (once a trial has finished) and objective.png in the sweep directory."""
    sweep.dir.mkdir(parents=True, exist_ok=True)
    table = rows(study, sweep)
    paths = {"csv": sweep.dir / "results.csv", "md": sweep.dir / "results.md"}
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(table[0]) if table else ["trial"])
    writer.writeheader()
    writer.writerows(table)
    write_text(paths["csv"], text.getvalue())  # whole or as it was: a sweep killed mid-write keeps its table
    write_text(paths["md"], markdown(table, sweep))
    if best_yaml(study, sweep, sweep.dir / "best.yaml"):
        paths["best"] = sweep.dir / "best.yaml"
    paths["plot"] = sweep.dir / "objective.png"
    plot(study, sweep, paths["plot"])
    return paths


def merge_best(study: optuna.Study, sweep: Sweep) -> Path | None:
    """The `merge.top_k` best finished trials averaged into <sweep_dir>/merged (`rm merge`), or None when the sweep
    merges none; fewer finished trials than asked is one line saying so."""
    k = sweep.cfg.merge.top_k
    if not k:
        return None
    done = [t for t in ordered(study, direction(sweep.cfg) == "maximize") if t.state == TrialState.COMPLETE][:k]
    if len(done) < max(k, 2):
        raise ConfigError(f"merge.top_k={k}: the sweep has {len(done)} finished trials; merge needs {max(k, 2)}")
    runs = [t.user_attrs.get("output_dir") or str(sweep.dir / "trials" / f"{t.number:04d}") for t in done]
    from rm.scoring.weight_average import merge_models  # here: a sweep process that merges nothing loads no model code

    return merge_models(runs, sweep.dir / "merged", max_distance=sweep.cfg.merge.max_distance, overwrite=True)
