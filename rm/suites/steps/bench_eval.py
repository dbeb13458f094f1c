"""`rm eval --suite processbench`: ProcessBench scored with a reward model read as a PRM, and the same suite under
`train.eval_suites` (`BenchSuite`).

Each item's problem and steps are tokenized by rm's one step rule (rm/tokens/steps/step_tokens.py: the problem
plus the separator, then each step plus the separator alone), items that share a problem as one problem with
several solutions (its prompt computed once in the shared layout). The separator is the caller's, else the
model's own (`model_separator`: an rm PRM export records it as `rm_step_separator`), else a blank line. Every step
is read in one forward per batch (`step_outputs`, dealt to the processes and gathered once by
rm/suites/score_items.py's `score_step_problems`), P(correct) = sigmoid(output), and judged by bench_block.py.

Into `out` go:

    eval.json          {"suite": the ProcessBench block (bench_block.py), "eval": what was read and how}
    report.md          the table, the metric's definition and the notes
    step_scores.jsonl  one line per item, in the data's order: origin, id, split, generator, label, prediction
                       (null where not judged), each step's P(correct) (null: not scored), steps_cut
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase

from rm.collate.scoring import Layout
from rm.config.atomic import write_text
from rm.config.rundir import EVAL
from rm.data.data_report import DataReport, shown_text
from rm.evaluation import metrics
from rm.evaluation.eval_report import EvalOptions
from rm.evaluation.gather import shut_down
from rm.evaluation.score_file import default_layout
from rm.evaluation.steps.step_scoring import probability
from rm.suites.score_items import score_step_problems, suite_model
from rm.suites.steps.bench_block import bench_block, bench_markdown, data_notes, prediction
from rm.suites.steps.bench_records import HUB, NAME, BenchItem, load_bench, split_names
from rm.tokens.steps.step_tokens import StepIds, encode_steps, model_separator
from rm.tokens.tokenizer import special_prefix


class BenchData(Protocol):
    """What to read (rm/suites/suite_eval.py's `SuiteData` is one)."""

    source: str
    split: str
    subsets: list[str] | None
    on_bad_record: str
    step_separator: str


class BenchSuite:
    """ProcessBench's items encoded once (problems with their solutions), scored whenever called: `rm eval`
    scores it once, `train.eval_suites` at every eval."""

    def __init__(self, items: list[BenchItem], tokenizer: PreTrainedTokenizerBase, max_length: int, separator: str):
        self.items, self.separator = items, separator
        problems: dict[str, list[int]] = {}  # problem text -> its items, in the data's order
        for k, item in enumerate(items):
            problems.setdefault(item.problem, []).append(k)
        self.where = [(0, 0)] * len(items)  # per item: (problem, solution)
        self.encoded: list[StepIds] = []
        prefix = special_prefix(tokenizer)
        for p, (problem, members) in enumerate(problems.items()):
            solutions = [items[k].steps for k in members]
            self.encoded.append(encode_steps(tokenizer, problem, solutions, separator, max_length, prefix))
            for s, k in enumerate(members):
                self.where[k] = (p, s)
        self.cut = [self.encoded[p].steps_cut[s] for p, s in self.where]
        """Per item, its trailing steps that did not fit max_length."""

    @property
    def notes(self) -> list[str]:
        """How the data differs from the paper's (splits, items left out for their length): known before scoring."""
        return data_notes(self.items, self.cut)

    def probabilities(self, model: torch.nn.Module, layout: Layout, batch_size: int, accelerator: Accelerator) -> list:
        """Per item, per step, P(correct) (None: not scored, or not finite), on every process."""
        outputs = score_step_problems(model, self.encoded, layout, batch_size, accelerator)
        return [[probability(v) for v in outputs[p][s]] + [None] * cut
                for (p, s), cut in zip(self.where, self.cut, strict=True)]  # fmt: skip

    def block(self, model: torch.nn.Module, layout: Layout, batch_size: int, accelerator: Accelerator) -> dict:
        """eval.json's `suite` block for `model` as it is now (bench_block.py)."""
        return bench_block(self.items, self.probabilities(model, layout, batch_size, accelerator), self.cut)


@dataclass
class BenchRun:
    """A scored ProcessBench: eval.json's dict, and per item its step probabilities (for step_scores.jsonl)."""

    result: dict
    items: list[BenchItem]
    probs: list[list[float | None]]
    cut: list[int]


def evaluate_bench(
    model: str, data: BenchData, out: str | Path, options: EvalOptions, loaded: tuple | None = None
) -> dict:
    """Score ProcessBench with `model` on every process; the main process writes eval.json, report.md and
    step_scores.jsonl into `out` and returns eval.json's dict, the others {}."""
    run = score_bench(model, data, options, loaded)
    if run is None:
        return {}
    write_bench(Path(out), run)
    return run.result


def score_bench(model: str, data: BenchData, options: EvalOptions, loaded: tuple | None = None) -> BenchRun | None:
    """eval.json's numbers on the main process (None on the others), the process group ended. `loaded`: the
    (model, tokenizer) `rm eval` loaded (rm/scoring/inference.py); None: loaded here."""
    started = time.perf_counter()
    accelerator = Accelerator()
    reward_model, tokenizer, max_length = suite_model(model, options, loaded, accelerator)
    report = DataReport(data.on_bad_record)
    items = load_bench(data.source, data.split, data.subsets, report)
    separator = data.step_separator or model_separator(reward_model.hf.config)
    bench = BenchSuite(items, tokenizer, max_length, separator)
    layout = default_layout(reward_model, tokenizer.pad_token_id)
    probs = bench.probabilities(reward_model, layout, options.batch_size, accelerator)
    shut_down(accelerator)  # every step's score is on every process: the group's work is done
    if not accelerator.is_main_process:
        return None
    block = bench_block(items, probs, bench.cut)
    said = "the caller" if data.step_separator else "the model's config" if model_separator(
        reward_model.hf.config, "") else "rm's default"  # fmt: skip
    info = eval_info(model, data, report, bench, probs) | {
        "max_length": max_length, "step_separator_from": said, "processes": accelerator.num_processes,
        "batch_size": options.batch_size, "dtype": options.dtype, "seconds": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    return BenchRun({"suite": block, "eval": shown_text(info)}, items, probs, bench.cut)


def eval_info(model: str, data: BenchData, report: DataReport, bench: BenchSuite, probs: list) -> dict:
    """eval.json's `eval`: what was read, what was skipped, how many steps were scored, cut or not finite."""
    source = data.source or HUB
    splits = ", ".join(split_names(source, data.split, data.subsets))
    scored = [p for row, c in zip(probs, bench.cut, strict=True) for p in row[: len(row) - c]]
    return {
        "model": model, "data": f"`{source}` (splits {splits}), suite {NAME}", "suite": NAME,
        "items_loaded": len(bench.items), "records_skipped": report.skipped_counts(),
        "skipped": [{"origin": b.origin, "reason": b.reason} for b in report.skipped],
        "step_separator": bench.separator, "steps": sum(len(i.steps) for i in bench.items),
        "steps_cut": sum(bench.cut), "items_cut": sum(c > 0 for c in bench.cut),
        "outputs_nonfinite": sum(p is None for p in scored),
    }  # fmt: skip


def step_rows(run: BenchRun) -> list[dict]:
    """step_scores.jsonl's lines: per item what it is, what the model predicted, each step's probability."""
    return [{"origin": i.origin, "id": i.id, "split": i.split, "generator": i.generator, "label": i.label,
             "prediction": prediction(p, c, run.result["suite"]["threshold"]), "final_answer_correct":
             i.final_answer_correct, "step_probs": p, "steps_cut": c}
            for i, p, c in zip(run.items, run.probs, run.cut, strict=True)]  # fmt: skip


def write_bench(out: Path, run: BenchRun) -> None:
    """eval.json, report.md and step_scores.jsonl in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    metrics.write_eval(out / EVAL, run.result)
    rows = shown_text(step_rows(run))
    write_text(out / "step_scores.jsonl", "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))
    info = run.result["eval"]
    head = (f"# ProcessBench: {info['model']}\n\n{info['data']}: {info['items_loaded']} items, max_length "
            f"{info['max_length']}, step separator {json.dumps(info['step_separator'], ensure_ascii=False)} (from "
            f"{info['step_separator_from']}), {info['processes']} process(es).\n\n")  # fmt: skip
    write_text(out / "report.md", head + bench_markdown(run.result["suite"]))
