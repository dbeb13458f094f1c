"""Pair-level summaries, overall and per subset: the shape of every eval.json rm writes.

Training's eval, an export's eval and `rm eval` all report `{"overall": {...}, "subsets": {name: {...}}}`;
`by_subset` is the one place that splits rows by subset, so the three cannot disagree on it. Where the
eval set is groups (one prompt, K responses), the pairwise numbers are those of its strictly ordered pairs and
`with_group_metrics` adds the group metrics beside them (rm/evaluation/ranking_metrics.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch

from rm.errors import ConfigError
from rm.evaluation.metrics import ece, length_bias
from rm.evaluation.ranking_metrics import length_picks, score_flat, summarize_scores


def summarize(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, Any]:
    """Accuracy (a tie counts as half right: the model expressed no preference), n, mean gap, and the
    expected calibration error of sigmoid(r_chosen - r_rejected) (see `rm.evaluation.metrics.ece`), and the
    Bradley-Terry loss -log sigmoid(r_chosen - r_rejected) without margin (what sweeps can minimise)."""
    diff = (chosen - rejected).double()
    correct = (diff > 0).double() + 0.5 * (diff == 0).double()
    return {
        "accuracy": correct.mean().item() if len(diff) else float("nan"),
        "loss": torch.nn.functional.softplus(-diff).mean().item() if len(diff) else float("nan"),
        "n": len(diff),
        "ece": ece(chosen.double().numpy(), rejected.double().numpy()),
        "mean_margin": diff.mean().item() if len(diff) else float("nan"),
        "mean_chosen_reward": chosen.double().mean().item() if len(diff) else float("nan"),
        "mean_rejected_reward": rejected.double().mean().item() if len(diff) else float("nan"),
    }


def by_subset(summary: Callable[[Any], dict], subset_ids: torch.Tensor | np.ndarray, names: list[str]) -> dict:
    """{"overall": summary(all rows), "subsets": {name: summary(its rows)}} for each name that has rows.

    `summary` takes a boolean mask over the rows; `subset_ids[i]` is row i's index into `names`.
    """
    everything = np.ones(len(subset_ids), dtype=bool)
    if isinstance(subset_ids, torch.Tensor):
        everything = torch.from_numpy(everything)
    result = {"overall": summary(everything), "subsets": {}}
    for i, name in enumerate(names):
        mask = subset_ids == i
        if mask.any():
            result["subsets"][name] = summary(mask)
    return result


def summarize_by_subset(scores: dict[str, torch.Tensor], names: list[str]) -> dict:
    """eval.json's numbers from {"chosen", "rejected", "subset_ids"} rewards (each [pairs])."""
    c, r = scores["chosen"].float(), scores["rejected"].float()
    return by_subset(lambda m: summarize(c[m], r[m]), scores["subset_ids"], names)


def with_group_metrics(pairwise: dict[str, Any], groups: dict[str, Any]) -> dict[str, Any]:
    """The pairwise summary of a set's strict pairs with its group summary's other keys beside it: the pairwise
    keys keep their values (both count accuracy and n over the same pairs), except the interval, which resamples
    prompts (for one pair per prompt, the pairwise interval draw for draw). A group metric the set leaves undefined
    (no tied pair to measure, no group with an order) is None, as eval.json writes it, so a result compares equal
    to the file it was written to."""
    undefined = {k for k, v in groups.items() if isinstance(v, float) and math.isnan(v)}
    return pairwise | {k: None if k in undefined else v for k, v in groups.items() if k not in ("accuracy", "n")}


def group_columns(gathered: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """`score_flat` of gathered rewards (rm/evaluation/gather.py's `gather_rewards`): each group scored once."""
    counts = torch.bincount(gathered["group"], minlength=len(gathered["index"]))
    start = (torch.cumsum(counts, 0) - counts)[gathered["pair_group"]]
    return score_flat(
        gathered["reward"].double().numpy(),
        gathered["group"].numpy(),
        gathered["rank"].numpy(),
        gathered["pair_group"].numpy(),
        (start + gathered["a"]).numpy(),
        (start + gathered["b"]).numpy(),
        gathered["tie"].numpy(),
    )


def summarize_groups(
    gathered: dict[str, torch.Tensor], names: list[str], samples: int = 1000, seed: int = 0, lengths=None
) -> dict:
    """eval.json's numbers from gathered rewards: per subset and overall, `summarize` of the strict pairs (for a
    pairwise eval set exactly `summarize_by_subset`'s) with the group metrics beside them; with `lengths` (each
    gathered response's length, [responses]: `response_tokens`) the length controls too (metrics.length_bias and
    the longest / shortest picks of ranking_metrics.py), so a run's summary says how far length explains it."""
    c, r = gathered["chosen"].float(), gathered["rejected"].float()
    strict_group = gathered["pair_group"][~gathered["tie"]]
    columns = group_columns(gathered)
    prompts = gathered["prompt"].numpy()
    if lengths is not None:
        size = np.bincount(gathered["group"].numpy(), minlength=len(gathered["index"]))
        start = (np.cumsum(size) - size)[gathered["pair_group"].numpy()]
        strict = ~gathered["tie"].numpy()
        len_c, len_r = (lengths[(start + gathered[k].numpy())[strict]] for k in ("a", "b"))
        columns |= length_picks(lengths, gathered["group"].numpy(), gathered["rank"].numpy(), len(size))

    def summary(mask: torch.Tensor) -> dict:
        rows = mask.numpy()
        groups = summarize_scores({k: v[rows] for k, v in columns.items()}, prompts[rows], samples=samples, seed=seed)
        pairs = mask[strict_group]
        pairwise = summarize(c[pairs], r[pairs])
        if lengths is not None:
            kept = pairs.numpy()
            bias = length_bias(c[pairs].double().numpy(), r[pairs].double().numpy(), len_c[kept], len_r[kept])
            pairwise |= {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in bias.items()}  # as saved
        return with_group_metrics(pairwise, groups)

    return by_subset(summary, gathered["subset"], names) | ({"length_unit": TOKENS} if lengths is not None else {})


TOKENS = "tokens of the response, as the model saw it"
"""eval.json's `length_unit` of a run's own eval (`response_tokens`); `rm eval`'s `eval.length_unit` is characters."""


def response_tokens(split: object, gathered: dict[str, torch.Tensor]) -> np.ndarray | None:
    """Each gathered response's length in tokens, as the model saw it (its ids fitted into max_length), read from
    the encoded split the eval scored (rm/tokens/store.py); None where the loader's data is not one. A run keeps no
    text past encoding, so its own eval measures length in tokens, where `rm eval` counts characters."""
    table = getattr(split, "table", None)
    if table is None or "response_ids" not in table.schema.names:
        return None
    ids = table.column("response_ids").combine_chunks()
    per_group = ids.offsets.to_numpy()  # group i's responses are flat rows per_group[i] .. per_group[i + 1]
    tokens = pc.list_value_length(ids.flatten()).to_numpy(zero_copy_only=False).astype(np.float64)
    rows = per_group[gathered["index"].numpy()][gathered["group"].numpy()] + gathered["slot"].numpy()
    return tokens[rows]


@dataclass(frozen=True, kw_only=True)
class Metric:
    """An eval.json block computed from gathered labels (rm/data/labels.py): training's eval and `rm eval` add it
    wherever every label it `reads` was gathered, so a new label's metric is one declaration."""

    name: str
    """Its key in eval.json."""
    reads: tuple[str, ...]
    block: Callable[[dict[str, torch.Tensor], list[str]], dict]
    """(gathered columns: rm/evaluation/gather.py's `arranged`, labels by name; subset names) -> the block."""


EVAL_KEYS = {"overall", "subsets", "attributes", "soft_calibration", "calibration", "eval", "suite", "length_bins"}
EVAL_KEYS |= {"scored", "scores", "suites", "length_unit"}  # "suites": a training run's last leaderboard scores
_METRICS: dict[str, Metric] = {}


def register_metric(metric: Metric) -> Metric:
    """Add `metric` to every eval; a name eval.json already uses, or another metric's, is refused."""
    if _METRICS.get(metric.name) not in (None, metric) or metric.name in EVAL_KEYS:
        raise ConfigError(f"metric {metric.name!r}: eval.json already has a block of that name; choose another")
    _METRICS[metric.name] = metric
    return metric


def unregister_metric(name: str) -> None:
    _METRICS.pop(name, None)


def label_blocks(gathered: dict[str, torch.Tensor], subsets: list[str]) -> dict[str, dict]:
    """The registered metrics' blocks whose labels were all gathered."""
    return {m.name: m.block(gathered, subsets) for m in _METRICS.values() if all(n in gathered for n in m.reads)}
