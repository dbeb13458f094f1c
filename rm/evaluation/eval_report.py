"""`python -m rm eval`: score preference pairs and groups with any reward model and write the evaluation report.

The data goes through training's own path: its choice of eval pairs and groups (`rm.data.load.eval_pairs`),
encoder (`encode_kept`), layout, eval plan (`PairBatches` dealt by `EvalBatches`) and gathering
(`gather_rewards`), so evaluating an export on its run's held-out pairs reproduces the run's eval.json
accuracy; under `accelerate launch` each process runs its share of the micro-batches one process would, and
every group is gathered exactly once (rm/evaluation/split_rewards.py). The main process then computes
`rm.evaluation.metrics` over the strictly ordered pairs and `rm.evaluation.ranking_metrics` over the groups,
per subset (rm/evaluation/eval_result.py), and writes, into `out`:

    eval.json          {"overall": {...}, "subsets": {name: {...}}, "calibration", "length_bins", "eval"}
    report.md          the tables (rm/evaluation/report/markdown.py), with the figures inline
    report.html        the same tables and figures in one self-contained page, with a pair browser (html_page.py)
    rewards.jsonl      one line per pair or group: origin, subset, rewards, lengths (the input's order)
    accuracy.png  calibration.png  reward_hist.png  length_bias.png  (and groups.png for group data)

A model with attribute outputs (output 0 the reward, outputs 1.. named in `id2label`) has the records'
scores of those names read beside each response, and eval.json gets `attributes` (RMSE, Pearson, Spearman per
attribute and subset, AUC for a 0/1 one: rm/evaluation/attribute_metrics.py), drawn in attributes.png, and each
response's outputs in rewards.jsonl. Pairs with soft labels (a preference strength, loss.strength=soft) add
`soft_calibration` (rm/evaluation/soft_calibration.py); registered labels, their metrics' blocks (summary.py)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase

from rm.config import DataConfig
from rm.config.atomic import write_text
from rm.config.exportdir import ExportDir, model_eos
from rm.config.rundir import EVAL
from rm.data.data_report import DataReport, shown_text
from rm.data.load import Example, eval_pairs
from rm.errors import DataError
from rm.evaluation import metrics
from rm.evaluation.attribute_metrics import gathered_block
from rm.evaluation.eval_result import build_result, describe_data, training_overlap
from rm.evaluation.gather import shut_down
from rm.evaluation.report.figure_kit import save
from rm.evaluation.report.html_page import render_html
from rm.evaluation.report.markdown import has_groups, render_markdown
from rm.evaluation.report.page_figures import report_figures
from rm.evaluation.soft_calibration import gathered_calibration
from rm.evaluation.split_rewards import item_attributes, item_rewards, nonfinite_rewards, reward_rows, score_split
from rm.evaluation.summary import label_blocks
from rm.model.build import check_positions
from rm.model.pretrained import default_max_length, load_reward_model, model_attributes
from rm.tokens.encode import encode_kept
from rm.tokens.encode_report import EncodeReport
from rm.tokens.store import EncodedSplit

log = logging.getLogger("rm")

PLOTS = ("accuracy.png", "calibration.png", "reward_hist.png", "length_bias.png")
GROUP_PLOT = "groups.png"
"""Top-1 and best-of-K beside pairwise accuracy, per subset: drawn where the data has groups (`has_groups`)."""
ATTRIBUTE_PLOT = "attributes.png"
"""Each attribute output against the records' scores: drawn for a model with attribute outputs."""


@dataclass
class EvalOptions:
    """How `rm eval` loads the model and scores and summarises the pairs; which pairs is a `DataConfig`."""

    batch_size: int = 16
    """Pairs per micro-batch (training's train.eval_batch_size)."""
    max_length: int = 0
    """Tokens of prompt + response; 0: the run's collator.max_length saved with the export, else the model's limit."""
    samples: int = 1000
    """Bootstrap resamples behind each accuracy interval."""
    seed: int = 0
    """Seed of the bootstrap and of the length plot's subsample."""
    dtype: str = "float32"
    """Weights' dtype when loading: float32, bfloat16 or float16."""
    trust_remote_code: bool = False
    """Run code shipped with the model's repository."""
    num_threads: int = 0
    """torch CPU threads; 0: the cores this process may use, shared by the processes on the node."""

    def bootstrap(self) -> dict:
        """eval.json's `eval.bootstrap`: how the intervals were drawn (resampling prompts), for `rm eval` and suites."""
        return {"samples": self.samples, "seed": self.seed, "level": 0.95, "method": "percentile", "over": "prompts"}


def eval_block(
    options: EvalOptions,
    report: DataReport, *, model: str, data: str, loaded: int, max_length: int, processes: int, started: float,
    plots: list[str], truncated: int, rewards_nonfinite: int, dropped: list | None = None, responses_dropped: int = 0,
    **more: object,
) -> dict:  # fmt: skip
    """eval.json's `eval` block, for `rm eval` and the suites alike (`more`: the keys one of them adds): what was
    scored, what was left out and why, and how the numbers were drawn. Its paths (the model, the data, each left-out
    record's origin) are written as `shown_text` writes them: eval.json and report.md are shared."""
    return shown_text({
        "model": model, "data": data, "pairs_loaded": loaded, "records_skipped": report.skipped_counts(),
        "skipped": [{"origin": b.origin, "reason": b.reason} for b in report.skipped],
        "pairs_dropped_too_long": len(dropped or []), "dropped": dropped or [],
        "responses_dropped_too_long": responses_dropped, "prompts_truncated": truncated,
        "rewards_nonfinite": rewards_nonfinite, "max_length": max_length, "length_unit": "characters of the response",
        "bootstrap": options.bootstrap(), "processes": processes, **more,
        "seconds": round(time.perf_counter() - started, 1), "plots": plots,
    })  # fmt: skip


@dataclass
class Prepared:
    """What `rm eval` scores with and what it scores (`prepare`), each read as the model's training read it."""

    name: str
    """The model as the command named it: a folder or a hub name (eval.json's `eval.model`)."""
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    data: DataConfig
    """The data asked for, read by the text rule of the model's training where its export names one."""
    report: DataReport
    """What reading the data skipped, and the pairs a `max_eval_pairs` cap left out."""
    items: list[Example]
    attributes: list[str]
    """The names of the model's attribute outputs; [] for a model of one reward."""
    overlap: str
    """Why the items are (partly) the model's own training pairs (`training_overlap`); "" when they are not."""
    max_length: int


@dataclass
class Kept:
    """The items encoding kept (`encode`), in their order, one encoded group each, and what it left out."""

    items: list[Example]
    encoded: EncodedSplit
    dropped: list[str]
    """Origins of the items dropped: a pair whose responses alone exceed max_length, a group left with nothing."""
    report: EncodeReport
    subsets: list[str]
    """The loaded items' subset names, sorted: the encoded subset ids index them."""


def evaluate_model(
    model: str, data: DataConfig, out: str | Path, options: EvalOptions, loaded: tuple | None = None
) -> dict:
    """Score the eval pairs of `data` (`rm.data.load.eval_pairs`) with `model` on every process.

    The main process writes eval.json, report.md, rewards.jsonl and the plots into `out` and returns
    eval.json's dict; the other processes return {}. `loaded`: the (model, tokenizer) `rm eval` loaded from the
    folder `model` by the loader every command shares (rm/scoring/inference.py); None: loaded here."""
    started = time.perf_counter()
    accelerator = Accelerator()
    run = prepare(model, data, options, loaded, accelerator)
    kept = encode(run)
    gathered = score_split(run.model, kept.encoded, run.tokenizer.pad_token_id, options.batch_size, accelerator)
    if not accelerator.is_main_process:
        shut_down(accelerator)  # a clean process-group exit (gloo can abort at interpreter exit otherwise)
        return {}
    rewards = item_rewards(kept.items, kept.encoded, gathered, run.tokenizer, run.data.eos)
    result = eval_json(run, kept, gathered, rewards, options, processes=accelerator.num_processes, started=started)
    fits, outputs = attribute_files(run, kept, gathered)
    write_report(Path(out), result, kept.items, rewards, options.seed, fits, outputs)
    shut_down(accelerator)
    return result


def prepare(
    model: str, data: DataConfig, options: EvalOptions, loaded: tuple | None, accelerator: Accelerator
) -> Prepared:
    """The model on this process's device and the items to score, read as its training read them (the model
    first: its tokenizer's chat template renders message-list data), so that an export evaluated on its run's
    held-out pairs reproduces the run's eval.json; the main process warns when they are its training pairs."""
    reward_model, tokenizer = loaded or load_reward_model(
        model, options.dtype, options.trust_remote_code, num_threads=options.num_threads
    )
    if ExportDir(model).from_rm:  # its records read by the rule its training read them with (text_rule.py)
        data = replace(data, text_version=ExportDir(model).text_version())
    data = replace(data, eos=model_eos(reward_model.hf.config))  # its responses ended as in training (data.eos)
    report = DataReport(data.on_bad_record)
    overlap = training_overlap(model, data)
    if overlap and accelerator.is_main_process:
        log.warning("warning: %s", overlap)
    attributes = model_attributes(reward_model)
    # A run trained with soft labels: each pair's strength is read as its target, as trained (soft_calibration).
    items = eval_pairs(data, tokenizer, report, loss=ExportDir(model).soft_loss())  # encode takes the attributes
    reward_model.to(accelerator.device)
    max_length = options.max_length or default_max_length(model, reward_model)
    check_positions(max_length, reward_model.hf.config, "--max-length", model)
    return Prepared(model, reward_model, tokenizer, data, report, items, attributes, overlap, max_length)


def encode(run: Prepared) -> Kept:
    """Training's encoder, with the position of every item it keeps (it drops a pair whose responses alone exceed
    max_length, and a group left with nothing to compare); each dropped one is listed in eval.json. A kept item's
    index is its position among the kept ones: how gathering puts the rewards in order."""
    names = sorted({p.subset for p in run.items})
    encoded, rep, positions = encode_kept(
        run.items, run.tokenizer, run.max_length, names, "", False, run.attributes, run.data.eos
    )
    kept = [run.items[k] for k in positions.tolist()]
    dropped = [run.items[k].origin for k in sorted(set(range(len(run.items))) - set(positions.tolist()))]
    if not kept:
        raise DataError(f"{run.data.source}: no pairs to evaluate ({len(run.items)} loaded, {len(dropped)} too long)")
    return Kept(kept, encoded, dropped, rep, names)


def eval_json(
    run: Prepared,
    kept: Kept,
    gathered: dict[str, torch.Tensor],
    rewards: list[np.ndarray],
    options: EvalOptions,
    *,
    processes: int,
    started: float,
) -> dict:
    """eval.json's dict from the gathered columns (`score_split`) and each kept item's `rewards`: the numbers
    (`build_result`), the attribute and soft-label blocks where the model and the data have them, and the `eval`
    block, what was scored and left out. A reward that is not finite is left out of the numbers and counted."""
    nonfinite, nonfinite_items = nonfinite_rewards(kept.items, gathered)
    if nonfinite:  # an overflowing model's -Infinity is no JSON number, and it breaks the plots
        log.warning(
            "warning: %d of %d rewards are not finite (NaN or infinite) in %d of %d items: left out of the metrics, "
            "null in rewards.jsonl, listed in eval.json", nonfinite, len(gathered["reward"]), len(nonfinite_items),
            len(kept.items),
        )  # fmt: skip
    result = build_result(kept.items, rewards, options.samples, options.seed)
    if run.attributes:
        result["attributes"] = gathered_block(gathered, run.attributes, kept.subsets)
    if (calibration := gathered_calibration(gathered)) is not None:  # pairs with soft labels (loss.strength=soft)
        result["soft_calibration"] = calibration
    result |= label_blocks(gathered, kept.subsets)  # registered labels' metrics (rm/evaluation/summary.py)
    grouped = has_groups(result["overall"])
    result["eval"] = eval_block(
        options, run.report, model=run.name, data=describe_data(run.data, run.report), loaded=len(run.items),
        max_length=run.max_length, processes=processes, started=started, truncated=kept.report.prompt_truncated,
        rewards_nonfinite=nonfinite, dropped=kept.dropped, responses_dropped=kept.report.responses_dropped,
        training_data=run.overlap or None, nonfinite=nonfinite_items,
        calibration_bins=len(result["calibration"]["bins"]),
        plots=list(PLOTS) + ([GROUP_PLOT] if grouped else []) + ([ATTRIBUTE_PLOT] if run.attributes else []),
    )  # fmt: skip
    return result


def attribute_files(
    run: Prepared, kept: Kept, gathered: dict[str, torch.Tensor]
) -> tuple[tuple[np.ndarray, np.ndarray] | None, tuple[list[str], list[np.ndarray]] | None]:
    """`write_report`'s `fits` and `outputs` for a model with attribute outputs: every response's outputs and scores
    (attributes.png) and each item's outputs (rewards.jsonl); (None, None) for a model of one reward."""
    if not run.attributes:
        return None, None
    fits = (gathered["attribute_outputs"].double().numpy(), gathered["attribute_scores"].double().numpy())
    return fits, (run.attributes, item_attributes(kept.items, kept.encoded, gathered, run.tokenizer, run.data.eos))


def write_report(
    out: Path,
    result: dict,
    kept: list[Example],
    rewards: list[np.ndarray],
    seed: int,
    fits: tuple[np.ndarray, np.ndarray] | None = None,
    outputs: tuple[list[str], list[np.ndarray]] | None = None,
    more: list[dict] | None = None,
) -> None:
    """eval.json, rewards.jsonl (one line per item of `kept`, with its `rewards`: `reward_rows`), the plots,
    report.md and report.html (with `result["suite"]`'s scores where a suite set it); with `fits` (every response's
    attribute outputs and scores, [responses, A] each) the attribute plot of `result["attributes"]` too, and with
    `outputs` (the attribute names and each item's outputs) each response's attributes in rewards.jsonl; `more`: keys
    to add to each item's line (an ensemble's members' rewards)."""
    out.mkdir(parents=True, exist_ok=True)
    metrics.write_eval(out / EVAL, result)
    rows = reward_rows(kept, rewards, outputs)
    rows = rows if more is None else [row | extra for row, extra in zip(rows, more, strict=True)]
    write_text(out / "rewards.jsonl", "".join(json.dumps(metrics.json_safe(r), allow_nan=False) + "\n" for r in rows))
    drawn = report_figures(result, kept, rewards, seed, fits)  # the figures a test checks are the ones written
    figures = {name: save(figure, out / name) for name, figure in drawn.items()}
    write_text(out / "report.md", render_markdown(result))
    write_text(out / "report.html", render_html(result, kept, rewards, figures))
