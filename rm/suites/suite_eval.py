"""`python -m rm eval --suite NAME`: a leaderboard suite scored with any reward model, its own aggregates written
beside `rm eval`'s usual report.

The usual numbers (`overall`, `subsets`, calibration, length bias: rm.evaluation.eval_result.build_result) are
computed over the suite's items as pairs and groups (every chosen response above every rejected one); eval.json
adds `suite`: the leaderboard's section scores and overall figure, computed by the suite's own rule
(rm/suites/rewardbench.py, rewardbench2.py, rm_bench.py), with each figure's n, interval and chance level
(rm/suites/suite_intervals.py), what always picking the shortest or the longest answer scores by the same rules
(rm/suites/suite_length.py), and how the texts were formatted. Every response is
scored (rm/suites/score_items.py): cut to fit `max_length` where it must be, never dropped.

ProcessBench judges a PRM's step scores, not pairs: `evaluate_suite` hands it to rm/suites/steps/bench_eval.py,
which writes its own eval.json (`suite` and `eval` only), report.md and step_scores.jsonl.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from accelerate import Accelerator

from rm.config.exportdir import model_eos
from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.data.formats.group import Example
from rm.evaluation.eval_report import GROUP_PLOT, PLOTS, EvalOptions, eval_block, write_report
from rm.evaluation.eval_result import build_result
from rm.evaluation.gather import shut_down
from rm.evaluation.report.markdown import has_groups
from rm.evaluation.score_file import default_layout
from rm.suites.catalog import Suite, formatting, get_suite, load_items, load_prior_sets
from rm.suites.records import SuiteItem
from rm.suites.score_items import encode_items, score_all, suite_model
from rm.suites.steps.bench_eval import evaluate_bench
from rm.suites.steps.bench_records import NAME as BENCH
from rm.suites.suite_intervals import suite_uncertainty
from rm.suites.suite_length import length_controls

log = logging.getLogger("rm")


@dataclass
class SuiteData:
    """Which records a suite scores."""

    source: str = ""
    """A file, a downloaded dataset folder or a Hub name; empty: the suite's published dataset."""
    split: str = ""
    """Empty: the split the leaderboard scores (RewardBench: filtered, RewardBench 2: test, RM-Bench: train)."""
    subsets: list[str] | None = None
    on_bad_record: str = "error"
    chat_template: str = "auto"
    """auto (the model's chat template where it has one, else HH text), tokenizer or hh (data.chat_template)."""
    prior_sets: str = ""
    """RewardBench only: allenai/preference-test-sets (one split per subset) or a copy, for the Prior Sets figure."""
    step_separator: str = ""
    """ProcessBench only: the text after the problem and after each step; empty: the model's (`rm_step_separator`
    in its config), else rm's default, a blank line."""


def suite_scores(suite: Suite, items: list[SuiteItem], rewards: list[np.ndarray], prior=None) -> dict:
    """eval.json's `suite` numbers for the items' rewards (per item, per response in its order)."""
    if prior:
        return suite.block(items, rewards, *prior)
    return suite.block(items, rewards)


@dataclass
class SuiteRun:
    """A scored suite: eval.json's dict, and the items as pairs and groups with their rewards (for the report)."""

    result: dict
    examples: list[Example]
    rewards: list[np.ndarray]


def evaluate_suite(
    model: str, suite_name: str, data: SuiteData, out: str | Path, options: EvalOptions, loaded: tuple | None = None
) -> dict:
    """Score the suite's records with `model` on every process; the main process writes eval.json (with its
    `suite` block), report.md, rewards.jsonl and the plots into `out` and returns eval.json's dict, the others {}.
    `loaded`: the (model, tokenizer) `rm eval` loaded from the folder `model` (rm/scoring/inference.py); None:
    loaded here. ProcessBench, a suite of steps rather than pairs, writes its own files (rm/suites/steps/)."""
    if suite_name == BENCH:
        return evaluate_bench(model, data, out, options, loaded)
    run = score_suite(model, suite_name, data, options, loaded)
    if run is None:
        return {}
    write_report(Path(out), run.result, run.examples, run.rewards, options.seed)
    return run.result


def score_suite(
    model: str, suite_name: str, data: SuiteData, options: EvalOptions, loaded: tuple | None = None
) -> SuiteRun | None:
    """eval.json's numbers for the suite on the main process (None on the others), the process group ended."""
    started = time.perf_counter()
    suite = get_suite(suite_name)
    accelerator = Accelerator()
    reward_model, tokenizer, max_length = suite_model(model, options, loaded, accelerator)
    report = DataReport(data.on_bad_record)
    renderer = Renderer(tokenizer, data.chat_template)
    items = load_items(suite, data.source, data.split, renderer, report, data.subsets)
    prior = load_prior_sets(data.prior_sets, renderer, report) if data.prior_sets else []
    eos = model_eos(reward_model.hf.config)  # how its responses ended in training (data.eos)
    encoded = encode_items(items + prior, tokenizer, max_length, eos)
    layout = default_layout(reward_model, tokenizer.pad_token_id)
    flat = score_all(reward_model, encoded.groups, layout, options.batch_size, accelerator)
    shut_down(accelerator)  # every reward is on every process: the group's work is done
    if not accelerator.is_main_process:
        return None
    rewards = encoded.item_rewards(flat)
    mine, theirs = rewards[: len(items)], rewards[len(items) :]
    block = suite_scores(suite, items, mine, (prior, theirs) if prior else None)
    block["uncertainty"] = suite_uncertainty(suite.name, items + prior, rewards, options.samples, options.seed)
    block["length_controls"] = length_controls(suite, items, prior, options.samples, options.seed)
    nonfinite = int(np.sum(~np.isfinite(flat)))
    if nonfinite:
        block["notes"].append(f"{nonfinite} rewards are not finite (NaN or infinite): counted as wrong")
    examples = [i.example() for i in items + prior]
    metric_rewards = [np.where(np.isfinite(r), r, np.nan) for r in rewards]
    result = build_result(examples, metric_rewards, options.samples, options.seed)
    result["suite"] = {**block, "formatting": formatting(renderer, tokenizer, items),
                       "texts_truncated": encoded.truncated}  # fmt: skip
    result["eval"] = eval_block(
        options,
        report,
        model=model,
        loaded=len(examples),
        max_length=max_length,
        started=started,
        data=f"`{data.source or suite.hub}` (split `{data.split or suite.split}`), suite {suite.name}",
        processes=accelerator.num_processes,
        truncated=encoded.truncated,
        rewards_nonfinite=nonfinite,
        suite=suite.name,
        texts=encoded.responses,
        texts_truncated=encoded.truncated,
        batch_size=options.batch_size,
        plots=list(PLOTS) + ([GROUP_PLOT] if has_groups(result["overall"]) else []),
    )  # a suite cuts a long text (texts_truncated), never drops it
    return SuiteRun(result, examples, metric_rewards)
