"""`rm eval --model A B C [--merged M]`: score an ensemble of reward models (and a merged model of them) on preference
data, and write eval.json and the report of the ensemble's mean with an `ensemble` block beside it.

The one-model path of rm/evaluation/eval_report.py, run once per member: the data is read and encoded once (the
members share their tokenizer, chat template, text rule and max_length, which `rm eval` checks before it scores:
rm/scoring/members.py), then each member scores the very micro-batches `rm eval --model A` would, each group gathered
exactly once across processes in split order (`score_split`); only one member is on the device at a time. The main
process combines the gathered rewards per response (rm/evaluation/ensemble/ensemble_numbers.py: mean, std,
mean - k std) and writes into `out` what `rm eval` writes for one model, the mean standing for the model:

    eval.json       the mean's numbers at the top level (tools that read eval.json read the ensemble as one model),
                    and `ensemble`: each member's accuracy, the mean's, the conservative reward's, the merged
                    model's, the rewards' spread and whether the members' disagreement predicts the mean's errors
    report.md/html  the mean's report with an Ensemble section (rm/evaluation/ensemble/ensemble_text.py)
    rewards.jsonl   the mean's rewards, and beside each reward field the statistics `rm score` writes for an
                    ensemble (`chosen_reward_std`, `chosen_reward_members`, ...) and the merged model's
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator

from rm.config import DataConfig
from rm.data.data_report import shown_text
from rm.data.formats.pair import Pair
from rm.data.load import Example
from rm.evaluation.ensemble.ensemble_numbers import combine, ensemble_block
from rm.evaluation.eval_report import (
    EvalOptions,
    Kept,
    Prepared,
    attribute_files,
    encode,
    eval_json,
    prepare,
    write_report,
)
from rm.evaluation.eval_result import training_overlap
from rm.evaluation.gather import shut_down
from rm.evaluation.split_rewards import placed, score_split

log = logging.getLogger("rm")

DATA_COLUMNS = ("index", "subset", "group", "slot", "rank", "pair_group", "a", "b", "tie")
"""Gathered columns that say what was scored, not what a model made of it: the same for every member, or the
members' rewards would not be of the same responses."""


def evaluate_ensemble(
    members: list[tuple[str, tuple]],
    data: DataConfig,
    out: str | Path,
    options: EvalOptions,
    *,
    merged: tuple[str, tuple] | None = None,
    k: float = 1.0,
) -> dict:
    """Score the eval items of `data` with every member (name, (model, tokenizer)), and `merged` beside them, on
    every process; the main process writes eval.json, the report and rewards.jsonl into `out` and returns eval.json's
    dict, the others {}. The items are read by the first member's training rules (they share them)."""
    started = time.perf_counter()
    accelerator = Accelerator()
    names = [name for name, _ in members]
    run = prepare(names[0], data, options, members[0][1], accelerator)
    kept = encode(run)
    scoring = [*members, *([merged] if merged else [])]
    if accelerator.is_main_process:
        warn_overlap([name for name, _ in scoring[1:]], run)
    scored = [score_member(model, run, kept, options, accelerator) for _, (model, _) in scoring]
    if not accelerator.is_main_process:
        shut_down(accelerator)
        return {}
    gathered, by_merged = scored[: len(members)], scored[len(members) :]
    check_same_items(names, gathered + by_merged)
    mean_gathered, std, conservative = combined_columns(gathered, k)
    rewards, std_items, conservative_items = (per_item(run, kept, mean_gathered, c) for c in (None, std, conservative))
    combined = (rewards, std_items, conservative_items)
    each = [per_item(run, kept, g) for g in gathered]
    merged_rewards = [per_item(run, kept, g) for g in by_merged]
    named = replace(run, name=f"mean of {len(names)} models: {', '.join(names)}")
    result = eval_json(
        named, kept, mean_gathered, rewards, options, processes=accelerator.num_processes, started=started
    )
    merged_scores = (merged[0], merged_rewards[0]) if merged else None
    block = ensemble_block(kept.items, names, each, combined, result, k, options.samples, options.seed, merged_scores)
    result["ensemble"] = shown_text(block)  # names as eval.json's `eval.model` writes paths
    fits, outputs = attribute_files(run, kept, mean_gathered)
    more = member_columns(kept.items, each, combined, merged_rewards[0] if merged else None)
    write_report(Path(out), result, kept.items, rewards, options.seed, fits, outputs, more)
    shut_down(accelerator)
    return result


def score_member(
    model: torch.nn.Module, run: Prepared, kept: Kept, options: EvalOptions, accelerator: Accelerator
) -> dict[str, torch.Tensor]:
    """One member's gathered rewards of the kept items (`score_split`, as `rm eval` scores one model); the member is
    put back on the CPU after, so that the device holds one member at a time."""
    model.to(accelerator.device)
    gathered = score_split(model, kept.encoded, run.tokenizer.pad_token_id, options.batch_size, accelerator)
    if accelerator.device.type != "cpu":
        model.to("cpu")
    return gathered


def per_item(run: Prepared, kept: Kept, gathered: dict[str, torch.Tensor], column: np.ndarray | None = None) -> list:
    """Per kept item, its responses' values of a per-response `column` (default: the gathered rewards) in the item's
    order, NaN where a response was not scored or its value is not finite (split_rewards.py's `placed`)."""
    values = gathered["reward"] if column is None else torch.from_numpy(column)
    return placed(kept.items, kept.encoded, gathered, values, run.tokenizer)


def warn_overlap(names: list[str], run: Prepared) -> None:
    """The warning `prepare` gives the first member where the items are its training pairs, for the others."""
    for name in names:
        if overlap := training_overlap(name, run.data):
            log.warning("warning: %s", overlap)


def check_same_items(names: list[str], gathered: list[dict[str, torch.Tensor]]) -> None:
    """Every model's gathered rewards are of the same responses, in the same order (one encoding, one plan)."""
    for g in gathered[1:]:
        for key in DATA_COLUMNS:
            if not torch.equal(g[key], gathered[0][key]):
                raise RuntimeError(f"the ensemble's models scored different items ({key}): {', '.join(names)}")


def combined_columns(gathered: list[dict[str, torch.Tensor]], k: float) -> tuple[dict, np.ndarray, np.ndarray]:
    """(the first member's gathered columns with the mean over members as its model outputs, the std of each
    response's reward [responses], its conservative reward mean - k std [responses]). The mean's chosen and rejected
    rewards are taken from its reward column as gathering takes them (rm/evaluation/gather.py's `arranged`)."""
    mean, std, conservative = combine(stacked(gathered, "reward"), k)
    reward = torch.from_numpy(mean)
    out = dict(gathered[0]) | {"reward": reward}
    if "attribute_outputs" in out:  # [responses, A]: each output averaged over members as the reward is
        out["attribute_outputs"] = torch.from_numpy(combine(stacked(gathered, "attribute_outputs"), k)[0])
    counts = torch.bincount(out["group"], minlength=len(out["index"]))
    start = (torch.cumsum(counts, 0) - counts)[out["pair_group"]]
    strict = ~out["tie"]
    out["chosen"], out["rejected"] = reward[start + out["a"]][strict], reward[start + out["b"]][strict]
    return out, std, conservative


def stacked(gathered: list[dict[str, torch.Tensor]], key: str) -> np.ndarray:
    """Every member's gathered column `key`, one above the other: [M, responses, ...], float64."""
    return torch.stack([g[key].double() for g in gathered]).numpy()


def member_columns(
    items: list[Example], each: list[list[np.ndarray]], combined: tuple[list[np.ndarray], ...], merged: list | None
) -> list[dict]:
    """rewards.jsonl's ensemble keys per item, named as `rm score` names an ensemble's (rm/scoring/ensemble.py): beside
    each reward field KEY (a pair's `chosen_reward` and `rejected_reward`, which hold the mean, or a group's `rewards`,
    a list in its order) KEY_mean, KEY_std, KEY_conservative, KEY_members (each member's, in --model order) and,
    with a merged model, KEY_merged."""
    mean, std, conservative = combined
    rows = []
    for i, item in enumerate(items):
        values = {"mean": mean[i], "std": std[i], "conservative": conservative[i]}
        values["members"] = np.stack([m[i] for m in each], 1)  # [responses, M]
        values |= {"merged": merged[i]} if merged is not None else {}
        if isinstance(item, Pair):
            pair = (("chosen_reward", 0), ("rejected_reward", 1))
            rows.append({f"{key}_{name}": v[j].tolist() for key, j in pair for name, v in values.items()})
        else:
            rows.append({f"rewards_{name}": v.tolist() for name, v in values.items()})
    return rows
