"""`train.eval_suites`: leaderboard suites (rm/suites) scored with the model in training at each eval.

Each suite's records are read, rendered with the run's tokenizer and encoded once, when the run starts
(`suite_evals`); at each `train.eval_steps` and at the end of the loop every process scores its share of them
with the model as it is (rm/suites/score_items.py), and the suite's section scores and overall figure go to the
trackers as `suite/<name>/<section>` and `suite/<name>/score` (RM-Bench: `suite/rm-bench/<domain>/<easy|normal|
hard|average>`), and one line per suite to `<output_dir>/suites.jsonl`. How a suite's data differs from its
leaderboard's (a subset missing, one the leaderboard lacks scored apart: eval.json's notes) is one warning line
each when the run starts.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase

from rm.collate.scoring import Layout
from rm.config import RunConfig
from rm.config.rundir import RunDir
from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.evaluation.score_file import default_layout
from rm.suites.catalog import Suite, get_suite, load_items
from rm.suites.records import SuiteItem
from rm.suites.score_items import EncodedItems, encode_items, score_all
from rm.suites.steps.bench_eval import BenchSuite
from rm.suites.steps.bench_records import NAME as BENCH
from rm.suites.steps.bench_records import load_bench

log = logging.getLogger("rm")


@dataclass
class Loaded:
    suite: Suite
    items: list[SuiteItem]
    encoded: EncodedItems


class SuiteEvals:
    """The run's suites, encoded; called with the (prepared) model and the step after each eval."""

    def __init__(self, cfg: RunConfig, tokenizer: PreTrainedTokenizerBase, accelerator: Accelerator):
        self.cfg, self.accelerator, self.pad = cfg, accelerator, tokenizer.pad_token_id
        self.layout: Layout | None = None
        self.mode = "a" if cfg.train.resume else "w"  # a fresh run starts suites.jsonl anew, a resumed one goes on
        self.last: dict[str, dict] = {}  # {name: {step, score, sections}}: eval.json's `suites`, a sweep's objective
        renderer = Renderer(tokenizer, cfg.data.chat_template)  # rendered as the run renders its own data
        self.loaded: list[Loaded | BenchSuite] = []
        for s in cfg.train.eval_suites:
            if s.suite == BENCH:
                self.loaded.append(bench_suite(cfg, s.data, s.split, tokenizer, accelerator))
                continue
            suite = get_suite(s.suite)
            items = load_items(suite, s.data, s.split, renderer, DataReport("error"))
            self.loaded.append(
                Loaded(suite, items, encode_items(items, tokenizer, cfg.collator.max_length, cfg.data.eos))
            )
            log.info("suite %s: %d records, %d texts (%d cut to fit collator.max_length)", suite.name, len(items),
                     self.loaded[-1].encoded.responses, self.loaded[-1].encoded.truncated)  # fmt: skip
            for note in suite.notes(items) if accelerator.is_main_process else []:  # said once, before training
                log.warning("suite %s: %s", suite.name, note)

    def __call__(self, model: torch.nn.Module, step: int) -> dict[str, float]:
        """Score every suite, log its numbers at `step`; returns the logged metrics."""
        if self.layout is None:  # decided on the bare model: a probe forward must not go through DDP
            self.layout = default_layout(self.accelerator.unwrap_model(model), self.pad)
        metrics: dict[str, float] = {}
        for one in self.loaded:
            block = self.block(one, model)
            metrics |= suite_metrics(block)
            self.last[block["name"]] = {"step": step, "score": block["score"], "sections": block["sections"]}
            if self.accelerator.is_main_process:
                row = {"step": step, "suite": block["name"], "score": block["score"], "sections": block["sections"]}
                with open(RunDir(self.cfg.output_dir).suites_log, self.mode) as f:  # {step, suite, score, sections}
                    f.write(json.dumps(row) + "\n")
                self.mode = "a"
                log.info("step %d suite %s score %s %s", step, block["name"], _round(block["score"]),
                         {k: _round(v) for k, v in block["sections"].items()})  # fmt: skip
        self.accelerator.log(metrics, step=step)
        return metrics

    def block(self, one: Loaded | BenchSuite, model: torch.nn.Module) -> dict:
        """One suite's numbers for the model as it is now."""
        size = self.cfg.train.eval_batch_size
        if isinstance(one, BenchSuite):  # step scores are read from the reward model itself, not its DDP wrapper
            return one.block(self.accelerator.unwrap_model(model), self.layout, size, self.accelerator)
        flat = score_all(model, one.encoded.groups, self.layout, size, self.accelerator)
        return one.suite.block(one.items, one.encoded.item_rewards(flat))


def bench_suite(
    cfg: RunConfig, source: str, split: str, tokenizer: PreTrainedTokenizerBase, accelerator: Accelerator
) -> BenchSuite:
    """ProcessBench's items encoded as the run encodes its steps (data.step_separator, collator.max_length)."""
    bench = BenchSuite(load_bench(source, split, None, DataReport("error")), tokenizer, cfg.collator.max_length,
                       cfg.data.step_separator)  # fmt: skip
    log.info("suite %s: %d items, %d steps (%d items cut to fit collator.max_length: left out)", BENCH,
             len(bench.items), sum(len(i.steps) for i in bench.items), sum(c > 0 for c in bench.cut))  # fmt: skip
    for note in bench.notes if accelerator.is_main_process else []:
        log.warning("suite %s: %s", BENCH, note)
    return bench


def suite_metrics(block: dict) -> dict[str, float]:
    """The tracker scalars of one suite's numbers (a section without a number is not logged)."""
    name = block["name"]
    out = {f"suite/{name}/score": block["score"]} if block["score"] is not None else {}
    for section, value in block["sections"].items():
        if isinstance(value, dict):
            out |= {f"suite/{name}/{section}/{k}": v for k, v in value.items() if v is not None}
        elif value is not None:
            out[f"suite/{name}/{section}"] = value
    return out


def _round(value):
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return None if value is None else round(value, 4)


def suite_evals(cfg: RunConfig, tokenizer: PreTrainedTokenizerBase, accelerator: Accelerator) -> SuiteEvals | None:
    """The run's suites ready to score, or None when `train.eval_suites` is empty."""
    return SuiteEvals(cfg, tokenizer, accelerator) if cfg.train.eval_suites else None
