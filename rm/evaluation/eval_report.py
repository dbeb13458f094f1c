"""`python -m rm eval`: score preference pairs with any reward model and write the evaluation report.

The pairs go through training's own path: its choice of eval pairs (`rm.data.load.eval_pairs`), encoder
(`encode_kept`), layout, eval plan (`PairBatches` dealt by `EvalBatches`) and gathering (`gather_rewards`),
so evaluating an export on its run's held-out pairs reproduces the run's eval.json accuracy; under
`accelerate launch` each process runs its share of the micro-batches one process would, and every pair is
gathered exactly once. The main process then computes `rm.evaluation.metrics` per subset and writes, into `out`:

    eval.json          {"overall": {...}, "subsets": {name: {...}}, "calibration", "length_bins", "eval"}
    report.md          the tables (rm/evaluation/markdown.py), with the figures inline
    rewards.jsonl      one line per pair: origin, subset, both rewards, both lengths (the pairs' order)
    accuracy.png  calibration.png  reward_hist.png  length_bias.png
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from accelerate import Accelerator
from torch.utils.data import DataLoader

from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.collate.shard import EvalBatches
from rm.config import DataConfig
from rm.config.rundir import EVAL
from rm.data.data_report import DataReport
from rm.data.formats.pair import Pair
from rm.data.load import eval_pairs
from rm.errors import DataError
from rm.evaluation import metrics, plots
from rm.evaluation.gather import gather_rewards, shut_down
from rm.evaluation.markdown import render_markdown
from rm.evaluation.summary import by_subset
from rm.model.build import check_positions
from rm.model.pretrained import default_max_length, load_reward_model
from rm.model.probe import choose_layout
from rm.model.reward import RewardModel
from rm.tokens.encode import encode_kept
from rm.tokens.store import EncodedSplit

log = logging.getLogger("rm")

PLOTS = ("accuracy.png", "calibration.png", "reward_hist.png", "length_bias.png")


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
    """Why the pairs `data` picks are (partly) the model's own training pairs, from the export's rm_config.yaml;
    "" when they are not, or when nothing says. `rm eval` of a run's export on its own training file gave no
    word although 216 of its 240 pairs were training pairs: the accuracy of pairs it learnt is no estimate."""
    saved = Path(model) / "rm_config.yaml"
    if not saved.is_file():
        return ""
    run = yaml.safe_load(saved.read_text()) or {}
    trained = run.get("data", {})
    source = str(trained.get("source", ""))
    if source == "synthetic":  # the run wrote its generated data into <output_dir>/data
        source = str(Path(str(run.get("output_dir", ""))) / "data")
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
        f"rm_config.yaml: data.source={trained.get('source')}, data.train_split={trained.get('train_split')}): "
        "pairs it trained on score higher than new ones; evaluate its held-out pairs (--holdout "
        f"{trained.get('eval_fraction')} --split-seed {trained.get('split_seed', 0)}) or its eval split instead"
    )


def build_result(pairs: list[Pair], chosen: np.ndarray, rejected: np.ndarray, samples: int, seed: int) -> dict:
    """eval.json's numbers for `pairs` and their rewards (same order)."""
    len_c = np.array([len(p.chosen) for p in pairs], dtype=float)
    len_r = np.array([len(p.rejected) for p in pairs], dtype=float)
    names = sorted({p.subset for p in pairs})
    subset_ids = np.array([names.index(p.subset) for p in pairs], dtype=int)

    def summary(mask):
        return metrics.pair_summary(chosen[mask], rejected[mask], len_c[mask], len_r[mask], samples=samples, seed=seed)

    def diff_bins(mask):
        return metrics.length_diff_bins(chosen[mask], rejected[mask], len_c[mask], len_r[mask])

    return {
        **by_subset(summary, subset_ids, names),
        "calibration": {"bins": metrics.calibration_bins(chosen, rejected)},
        "length_bins": by_subset(diff_bins, subset_ids, names),
    }


def score_pairs(
    model: torch.nn.Module, encoded: EncodedSplit, pad: int, batch_size: int, accelerator: Accelerator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen, rejected) rewards of every encoded pair exactly once, in its order, on every process.

    Training's eval path: its layout (shared-prefix packing where the model reproduces separate forwards
    with it) and its eval plan, each process running its share of the very micro-batches one process would
    (`EvalBatches`; the loader is not prepared, since accelerate's sharding is a second plan), so a pair's
    reward comes from the same tensors under any number of processes. A process short of a micro-batch in
    the last round scores a pair again; gathering keeps one reward per pair index.
    """
    layout = choose_layout(model, "auto", pad)[0] if isinstance(model, RewardModel) else "padded"
    collate = SharedCollator(pad) if layout == "shared" else PaddedCollator(pad)
    plan = PairBatches(encoded, layout, batch_size, shuffle=False)
    batches = EvalBatches(plan, accelerator.process_index, accelerator.num_processes)
    gathered = gather_rewards(model, DataLoader(encoded, batch_sampler=batches, collate_fn=collate), accelerator)
    # Each pair exactly once (indices 0..n-1, each once), or the numbers made from them would be wrong.
    if not torch.equal(gathered["index"], torch.arange(len(encoded))):
        raise RuntimeError(f"gathered {len(gathered['index'])} rewards for {len(encoded)} pairs")
    return gathered["chosen"], gathered["rejected"]


def evaluate_model(model: str, data: DataConfig, out: str | Path, options: EvalOptions) -> dict:
    """Score the eval pairs of `data` (`rm.data.load.eval_pairs`) with `model` on every process.

    The main process writes eval.json, report.md, rewards.jsonl and the plots into `out` and returns
    eval.json's dict; the other processes return {}.
    """
    started = time.perf_counter()
    accelerator = Accelerator()
    # The model first: its tokenizer's chat template renders message-list data, as in training.
    reward_model, tokenizer = load_reward_model(
        model, options.dtype, options.trust_remote_code, num_threads=options.num_threads
    )
    report = DataReport(data.on_bad_record)
    overlap = training_overlap(model, data)
    if overlap and accelerator.is_main_process:
        log.warning("warning: %s", overlap)
    pairs = eval_pairs(data, tokenizer, report)
    reward_model.to(accelerator.device)
    max_length = options.max_length or default_max_length(model, reward_model)
    check_positions(max_length, reward_model.hf.config, "--max-length", model)

    # Training's encoder, with the position of every pair it keeps (it drops a pair whose responses alone
    # exceed max_length); each dropped one is listed in eval.json. A kept pair's index is its position among
    # the kept pairs: how gathering puts the rewards in order.
    names = sorted({p.subset for p in pairs})
    encoded, rep, positions = encode_kept(pairs, tokenizer, max_length, names)
    kept = [pairs[k] for k in positions.tolist()]
    dropped = [pairs[k].origin for k in sorted(set(range(len(pairs))) - set(positions.tolist()))]
    if not kept:
        raise DataError(f"{data.source}: no pairs to evaluate ({len(pairs)} loaded, {len(dropped)} too long)")
    chosen, rejected = score_pairs(reward_model, encoded, tokenizer.pad_token_id, options.batch_size, accelerator)
    if not accelerator.is_main_process:
        shut_down(accelerator)  # a clean process-group exit (gloo can abort at interpreter exit otherwise)
        return {}

    c, r = chosen.double().numpy(), rejected.double().numpy()
    result = build_result(kept, c, r, options.samples, options.seed)
    result["eval"] = {
        "model": model,
        "data": describe_data(data, report),
        "training_data": overlap or None,
        "pairs_loaded": len(pairs),
        "records_skipped": report.skipped_counts(),
        "skipped": [{"origin": b.origin, "reason": b.reason} for b in report.skipped],
        "pairs_dropped_too_long": len(dropped),
        "dropped": dropped,
        "prompts_truncated": rep.prompt_truncated,
        "max_length": max_length,
        "length_unit": "characters of the response",
        "bootstrap": {"samples": options.samples, "seed": options.seed, "level": 0.95, "method": "percentile"},
        "calibration_bins": len(result["calibration"]["bins"]),
        "processes": accelerator.num_processes,
        "seconds": round(time.perf_counter() - started, 1),
        "plots": list(PLOTS),
    }
    write_report(Path(out), result, kept, c, r, options.seed)
    shut_down(accelerator)
    return result


def write_report(out: Path, result: dict, kept: list[Pair], c: np.ndarray, r: np.ndarray, seed: int) -> None:
    """eval.json, rewards.jsonl (one line per pair of `kept`, rewards `c` and `r`), the plots and report.md."""
    out.mkdir(parents=True, exist_ok=True)
    metrics.write_eval(out / EVAL, result)
    with open(out / "rewards.jsonl", "w", encoding="utf-8") as f:
        for p, rc, rr in zip(kept, c.tolist(), r.tolist(), strict=True):
            row = {"origin": p.origin, "subset": p.subset, "chosen_reward": rc, "rejected_reward": rr}
            f.write(json.dumps(row | {"chosen_chars": len(p.chosen), "rejected_chars": len(p.rejected)}) + "\n")
    subset_of = np.array([p.subset for p in kept])
    rewards = {n: (c[subset_of == n], r[subset_of == n]) for n in result["subsets"]}
    lengths = tuple(np.array([len(getattr(p, k)) for p in kept], dtype=float) for k in ("chosen", "rejected"))
    plots.accuracy_plot(result, out / PLOTS[0])
    plots.calibration_plot(result, out / PLOTS[1])
    plots.reward_hist_plot(rewards, result, out / PLOTS[2])
    plots.length_plot(result, (c, r, *lengths), out / PLOTS[3], seed=seed)
    (out / "report.md").write_text(render_markdown(result))
