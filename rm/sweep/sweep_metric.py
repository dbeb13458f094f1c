"""`objective.metric`: the eval.json number a sweep judges its trials by, and the numbers its results show.

    accuracy, loss, ece                            the pairwise numbers (of `overall` or `objective.subset`)
    top1_accuracy, best_of_k_accuracy, kendall_tau the group metrics of K responses (rm/evaluation/ranking_metrics.py)
    suite:<name>[:<section>]                       a `train.eval_suites` suite's score (or one section's), eval.json's
                                                   `suites` (rm/training/suite_evals.py)
    attribute:<name>:<rmse|pearson|spearman|auc>   how well an attribute output predicts its scores (`attributes`)

Loss, ECE and RMSE are minimised by default, everything else maximised. What the base run's config decides is
checked before the first trial (`metric_problems`): a suite it does not score, an attribute its head lacks, group
metrics of data that is pairs only. What only its eval.json can show is one line naming what it does hold.
"""

from __future__ import annotations

import math

from rm.config import RunConfig
from rm.errors import ConfigError

PAIRWISE = ("accuracy", "loss", "ece")
RANKING = ("top1_accuracy", "best_of_k_accuracy", "kendall_tau")
ATTRIBUTE = ("rmse", "pearson", "spearman", "auc")
MINIMIZED = ("loss", "ece", "rmse")
FORMS = (*PAIRWISE, *RANKING, "suite:<name>[:<section>]", f"attribute:<name>:<{'|'.join(ATTRIBUTE)}>")
PAIR_FORMATS = ("hh", "prompt", "conversation", "argilla")
"""Formats whose records are pairs: their data has groups of K only when data.group_by_prompt merges a prompt's."""


class MissingMetric(ConfigError):
    """The run's eval result has no number for `objective.metric`: every trial's would lack it, so the sweep stops."""


def parse(metric: str) -> tuple[str, ...]:
    """("pairwise"|"ranking", key), ("suite", name, section or ""), ("attribute", name, key); ConfigError when the
    metric is none of `FORMS`."""
    kind, _, rest = metric.partition(":")
    if not rest and kind in PAIRWISE:
        return ("pairwise", kind)
    if not rest and kind in RANKING:
        return ("ranking", kind)
    if kind == "suite" and rest and rest.split(":", 1)[0]:
        name, _, section = rest.partition(":")
        return ("suite", name, section)
    if kind == "attribute" and rest.count(":") == 1 and rest.split(":")[0] and rest.split(":")[1] in ATTRIBUTE:
        return ("attribute", *rest.split(":"))
    raise ConfigError(f"objective.metric: {metric!r} is not one of {', '.join(FORMS)}")


def default_direction(metric: str) -> str:
    return "minimize" if parse(metric)[-1] in MINIMIZED else "maximize"


def metric_problems(metric: str, subset: str, base: RunConfig | None) -> list[str]:
    """Why `metric` cannot be read from the runs of `base` (None: the base config did not load), in the sweep
    file's terms; [] when it can or only the run can tell."""
    try:
        kind, name, *rest = parse(metric)
    except ConfigError as e:
        return [str(e)]
    out = []
    if kind == "suite" and subset:
        out.append(f"objective.subset: a suite's score has no eval subsets; leave it empty for {metric}")
    if base is None:
        return out
    if kind == "suite" and name not in (suites := [s.suite for s in base.train.eval_suites]):
        has = ", ".join(suites) or "none"
        out.append(f"objective.metric: {metric}: the base run's train.eval_suites has no {name!r} (has: {has})")
    if kind == "attribute" and name not in base.model.head.attributes:
        has = ", ".join(base.model.head.attributes) or "none"
        out.append(f"objective.metric: {metric}: the base run's model.head.attributes has no {name!r} (has: {has})")
    data = base.data
    pairs_only = data.source == "synthetic" or data.format in PAIR_FORMATS
    if kind == "ranking" and pairs_only and data.group_by_prompt is not True:
        what = "data.source=synthetic" if data.source == "synthetic" else f"data.format={data.format}"
        out.append(
            f"objective.metric: {metric} ranks groups of K responses, but the base run's data is pairs ({what}; "
            "on pairs it restates accuracy): sweep K-response data, or accuracy"
        )
    return out


def flat(result: dict, subset: str = "") -> dict[str, float | None]:
    """Every number `objective.metric` can name in an eval result, by its name there (of `subset`'s blocks where
    given: pairwise, group and attribute numbers; a suite has no subsets)."""
    out: dict[str, float | None] = {}
    block = result.get("subsets", {}).get(subset, {}) if subset else result.get("overall", {})
    out |= {k: block[k] for k in (*PAIRWISE, *RANKING) if k in block}
    for name, sub in (result.get("suites") or {}).items():
        out[f"suite:{name}"] = sub.get("score")
        for section, value in (sub.get("sections") or {}).items():
            if isinstance(value, dict):
                out |= {f"suite:{name}:{section}/{k}": v for k, v in value.items() if not isinstance(v, dict)}
            else:
                out[f"suite:{name}:{section}"] = value
    for name, numbers in (result.get("attributes") or {}).items():
        mine = numbers.get("subsets", {}).get(subset, {}) if subset else numbers.get("overall", {})
        out |= {f"attribute:{name}:{k}": v for k, v in mine.items() if k in ATTRIBUTE}
    return out


def read_metric(result: dict, metric: str, subset: str = "") -> float:
    """`metric` of `subset` (empty: overall) in an eval result; NaN where eval.json has it undefined (null), which
    fails the trial; MissingMetric naming what the result holds where it has no such number at all."""
    parse(metric)
    if subset and subset not in result.get("subsets", {}):
        raise ConfigError(f"objective.subset: no eval subset {subset!r}; the run has {sorted(result['subsets'])}")
    numbers = flat(result, subset)
    if metric not in numbers:
        raise MissingMetric(
            f"objective.metric: the run's eval.json has no {metric}{f' in subset {subset!r}' if subset else ''}; "
            f"it has: {', '.join(numbers) or 'nothing'}"
        )
    value = numbers[metric]
    return math.nan if value is None else float(value)


def shown_metrics(result: dict, metric: str, subset: str = "") -> dict[str, float | None]:
    """A finished trial's numbers for the results table: the objective's (labelled with its subset), overall
    accuracy, the group metrics of a K-response eval set and each suite's score."""
    numbers = flat(result)
    label = f"{metric} ({subset})" if subset else metric
    try:
        out = {label: read_metric(result, metric, subset)}
    except ConfigError:
        out = {label: None}
    overall = result.get("overall", {})
    ranked = (overall.get("n") or 0) > (overall.get("groups") or math.inf)  # some group of more than one pair
    keys = ["accuracy", *(RANKING if ranked else ()), *(k for k in numbers if k.count(":") == 1)]
    out |= {k: numbers.get(k) for k in keys if k in numbers and k not in out}
    return {k: None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for k, v in out.items()}
