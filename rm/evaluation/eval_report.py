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
response's outputs in rewards.jsonl; without them nothing changes. Pairs that carry soft labels (a preference
strength, loss.strength=soft) add `soft_calibration` (rm/evaluation/soft_calibration.py).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from accelerate import Accelerator

from rm.config import DataConfig
from rm.config.atomic import write_text
from rm.config.exportdir import RUN_CONFIG, ExportDir
from rm.config.head_config import HeadConfig
from rm.config.rundir import EVAL
from rm.data.data_report import DataReport
from rm.data.formats.group import rank_of
from rm.data.load import Example, eval_pairs
from rm.errors import DataError
from rm.evaluation import metrics
from rm.evaluation.attribute_metrics import gathered_block
from rm.evaluation.eval_result import build_result, strict_pairs
from rm.evaluation.gather import shut_down
from rm.evaluation.report import plots
from rm.evaluation.report.html_page import render_html
from rm.evaluation.report.markdown import has_groups, render_markdown
from rm.evaluation.soft_calibration import gathered_calibration
from rm.evaluation.split_rewards import item_attributes, item_rewards, nonfinite_rewards, reward_rows, score_split
from rm.model.build import check_positions
from rm.model.pretrained import default_max_length, load_reward_model, model_attributes
from rm.tokens.encode import encode_kept

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
    report: DataReport,
    *,
    model: str,
    data: str,
    loaded: int,
    max_length: int,
    processes: int,
    started: float,
    plots: list[str],
    truncated: int,
    rewards_nonfinite: int,
    dropped: list | None = None,
    responses_dropped: int = 0,
    **more: object,
) -> dict:
    """eval.json's `eval` block, for `rm eval` and the suites alike (`more`: the keys one of them adds): what was
    scored, what was left out and why, and how the numbers were drawn."""
    return {
        "model": model, "data": data, "pairs_loaded": loaded, "records_skipped": report.skipped_counts(),
        "skipped": [{"origin": b.origin, "reason": b.reason} for b in report.skipped],
        "pairs_dropped_too_long": len(dropped or []), "dropped": dropped or [],
        "responses_dropped_too_long": responses_dropped, "prompts_truncated": truncated,
        "rewards_nonfinite": rewards_nonfinite, "max_length": max_length, "length_unit": "characters of the response",
        "bootstrap": options.bootstrap(), "processes": processes, **more,
        "seconds": round(time.perf_counter() - started, 1), "plots": plots,
    }  # fmt: skip


def describe_data(data: DataConfig, report: DataReport) -> str:
    """Which pairs were scored, in a sentence (eval.json's `eval.data`, report.md's first lines).

    `report` is the one `eval_pairs` filled: it counted the pairs a `max_eval_pairs` cap left out."""
    held_out = not data.eval_split
    split = data.train_split if held_out else data.eval_split
    how = f"`{data.source}`" + (f" (split `{split}`)" if not Path(data.source).is_file() else "")
    if held_out:
        how += (
            f", the held-out {data.eval_fraction:g} of it (split seed {data.split_seed}, stratified by subset, "
            "as training does)"
        )
    if report.notes.get("capped", {}).get("eval_left_out"):
        how += f", a seeded sample of {data.max_eval_pairs} pairs"
    return how


def _same_place(a: str, b: str) -> bool:
    """Two sources name the same data: equal names, or local paths to one file or folder."""
    if a == b:
        return True
    pa_, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa_.exists() and pb.exists() and pa_.resolve() == pb.resolve()


def training_overlap(model: str, data: DataConfig) -> str:
    """Why the pairs `data` picks are (partly) the model's own training pairs, from the run config saved with the
    export; "" when they are not, or when nothing says. `rm eval` of a run's export on its own training file gave no
    word although 216 of its 240 pairs were training pairs: the accuracy of pairs it learnt is no estimate."""
    folder = ExportDir(model)
    if not folder.from_rm:
        return ""
    trained, source = folder.training_data()
    split = data.train_split if not data.eval_split else data.eval_split
    is_file = Path(data.source).expanduser().is_file()
    inside = (
        is_file and Path(source).expanduser().is_dir() and _same_place(str(Path(data.source).parent.parent), source)
    )
    same_split = is_file and not inside or split == trained.get("train_split", "train")
    if not (_same_place(data.source, source) or inside) or not same_split:
        return ""
    own_holdout = not data.eval_split and not trained.get("eval_split")
    same_draw = data.eval_fraction == trained.get("eval_fraction") and data.split_seed == trained.get("split_seed", 0)
    if own_holdout and same_draw:
        return ""  # exactly the run's held-out pairs
    return (
        f"{data.source}" + ("" if is_file else f" (split {split})") + f" is the data {model} was trained on (its "
        f"{RUN_CONFIG}: data.source={trained.get('source')}, data.train_split={trained.get('train_split')}): "
        "pairs it trained on score higher than new ones; evaluate its held-out pairs (--holdout "
        f"{trained.get('eval_fraction')} --split-seed {trained.get('split_seed', 0)}) or its eval split instead"
    )


def evaluate_model(
    model: str, data: DataConfig, out: str | Path, options: EvalOptions, loaded: tuple | None = None
) -> dict:
    """Score the eval pairs of `data` (`rm.data.load.eval_pairs`) with `model` on every process.

    The main process writes eval.json, report.md, rewards.jsonl and the plots into `out` and returns
    eval.json's dict; the other processes return {}. `loaded`: the (model, tokenizer) `rm eval` loaded from the
    folder `model` by the loader every command shares (rm/scoring/inference.py); None: loaded here."""
    started = time.perf_counter()
    accelerator = Accelerator()
    # The model first: its tokenizer's chat template renders message-list data, as in training.
    reward_model, tokenizer = loaded or load_reward_model(
        model, options.dtype, options.trust_remote_code, num_threads=options.num_threads
    )
    if ExportDir(model).from_rm:  # its records read by the rule its training read them with (text_rule.py)
        data = replace(data, text_version=ExportDir(model).text_version())
    report = DataReport(data.on_bad_record)
    overlap = training_overlap(model, data)
    if overlap and accelerator.is_main_process:
        log.warning("warning: %s", overlap)
    attributes = model_attributes(reward_model)
    # A run trained with soft labels: each pair's strength is read as its target, as trained (soft_calibration).
    read = {"loss": loss} if (loss := ExportDir(model).soft_loss()) is not None else {}
    if attributes:  # each response's scores of the model's attributes, read as training reads them (no scale check)
        read["head"] = HeadConfig(attributes=attributes)
    items = eval_pairs(data, tokenizer, report, **read)  # a model without either reads its pairs exactly as before
    reward_model.to(accelerator.device)
    max_length = options.max_length or default_max_length(model, reward_model)
    check_positions(max_length, reward_model.hf.config, "--max-length", model)

    # Training's encoder, with the position of every item it keeps (it drops a pair whose responses alone
    # exceed max_length, and a group left with nothing to compare); each dropped one is listed in eval.json. A
    # kept item's index is its position among the kept ones: how gathering puts the rewards in order.
    names = sorted({p.subset for p in items})
    encoded, rep, positions = encode_kept(items, tokenizer, max_length, names)
    kept = [items[k] for k in positions.tolist()]
    dropped = [items[k].origin for k in sorted(set(range(len(items))) - set(positions.tolist()))]
    if not kept:
        raise DataError(f"{data.source}: no pairs to evaluate ({len(items)} loaded, {len(dropped)} too long)")
    gathered = score_split(reward_model, encoded, tokenizer.pad_token_id, options.batch_size, accelerator)
    if not accelerator.is_main_process:
        shut_down(accelerator)  # a clean process-group exit (gloo can abort at interpreter exit otherwise)
        return {}

    rewards = item_rewards(kept, encoded, gathered, tokenizer)
    nonfinite, nonfinite_items = nonfinite_rewards(kept, gathered)
    if nonfinite:  # an overflowing model's -Infinity is no JSON number, and it breaks the plots
        log.warning(
            "warning: %d of %d rewards are not finite (NaN or infinite) in %d of %d items: left out of the metrics, "
            "null in rewards.jsonl, listed in eval.json", nonfinite, len(gathered["reward"]), len(nonfinite_items),
            len(kept),
        )  # fmt: skip
    result = build_result(kept, rewards, options.samples, options.seed)
    if attributes:
        result["attributes"] = gathered_block(gathered, attributes, names)
    if (calibration := gathered_calibration(gathered)) is not None:  # pairs with soft labels (loss.strength=soft)
        result["soft_calibration"] = calibration
    grouped = has_groups(result["overall"])
    result["eval"] = eval_block(
        options,
        report,
        model=model,
        data=describe_data(data, report),
        loaded=len(items),
        max_length=max_length,
        processes=accelerator.num_processes,
        started=started,
        truncated=rep.prompt_truncated,
        rewards_nonfinite=nonfinite,
        dropped=dropped,
        responses_dropped=rep.responses_dropped,
        training_data=overlap or None,
        nonfinite=nonfinite_items,
        calibration_bins=len(result["calibration"]["bins"]),
        plots=list(PLOTS) + ([GROUP_PLOT] if grouped else []) + ([ATTRIBUTE_PLOT] if attributes else []),
    )
    fits = outputs = None
    if attributes:  # every response's attribute outputs and scores, for the plot; each item's, for rewards.jsonl
        fits = (gathered["attribute_outputs"].double().numpy(), gathered["attribute_scores"].double().numpy())
        outputs = (attributes, item_attributes(kept, encoded, gathered, tokenizer))
    write_report(Path(out), result, kept, rewards, options.seed, fits, outputs)
    shut_down(accelerator)
    return result


def write_report(
    out: Path,
    result: dict,
    kept: list[Example],
    rewards: list[np.ndarray],
    seed: int,
    fits: tuple[np.ndarray, np.ndarray] | None = None,
    outputs: tuple[list[str], list[np.ndarray]] | None = None,
) -> None:
    """eval.json, rewards.jsonl (one line per item of `kept`, with its `rewards`: `reward_rows`), the plots,
    report.md and report.html (with `result["suite"]`'s scores where a suite set it); with `fits` (every response's
    attribute outputs and scores, [responses, A] each) the attribute plot of `result["attributes"]` too, and with
    `outputs` (the attribute names and each item's outputs) each response's attributes in rewards.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    metrics.write_eval(out / EVAL, result)
    rows = reward_rows(kept, rewards, outputs)
    write_text(out / "rewards.jsonl", "".join(json.dumps(metrics.json_safe(r), allow_nan=False) + "\n" for r in rows))
    # Per subset, the rewards of the best-ranked responses against the others': a pair's chosen and rejected.
    rewards_of: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in result["subsets"]}
    for p, r in zip(kept, rewards, strict=True):
        scored = ~np.isnan(r)
        if not scored.any():  # every reward non-finite: nothing of this item to draw
            continue
        rank = np.array(rank_of(p))
        best = rank == rank[scored].min()
        rewards_of[p.subset][0].extend(r[best & scored].tolist())
        rewards_of[p.subset][1].extend(r[~best & scored].tolist())
    hist = {n: (np.array(b), np.array(w)) for n, (b, w) in rewards_of.items()}
    grouped = has_groups(result["overall"])
    labels = ("best-ranked", "others") if grouped else ("chosen", "rejected")
    lengths = strict_pairs(kept, rewards)[1:]
    plots.accuracy_plot(result, out / PLOTS[0])
    plots.calibration_plot(result, out / PLOTS[1])
    plots.reward_hist_plot(hist, result, out / PLOTS[2], labels=labels)
    plots.length_plot(result, lengths, out / PLOTS[3], seed=seed)
    if grouped:
        plots.group_plot(result, out / GROUP_PLOT)
    if fits is not None:
        plots.attribute_plot(result, *fits, out / ATTRIBUTE_PLOT, seed=seed)
    write_text(out / "report.md", render_markdown(result))
    drawn = PLOTS + ((GROUP_PLOT,) if grouped else ()) + ((ATTRIBUTE_PLOT,) if fits is not None else ())
    figures = {name: out / name for name in drawn}
    write_text(out / "report.html", render_html(result, kept, rewards, figures))
