"""`python -m rm eval`: score preference pairs with any reward model and write the evaluation report.

The pairs go through training's own path (`encode_kept`, `PaddedCollator`, `gather_rewards`), so
evaluating an export on its run's held-out pairs reproduces the run's eval.json accuracy; under
`accelerate launch` each process scores a share and every pair is gathered exactly once. The main
process then computes `rm.evaluation.metrics` per subset and writes, into `--out`:

    eval.json          {"overall": {...}, "subsets": {name: {...}}, "calibration", "length_bins", "eval"}
    report.md          the tables below, with the figures inline
    rewards.jsonl      one line per pair: origin, subset, both rewards, both lengths (input order)
    accuracy.png  calibration.png  reward_hist.png  length_bias.png
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from accelerate import Accelerator
from torch.utils.data import DataLoader

from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.formats.pair import Pair
from rm.data.load import holdout_split, load_pairs
from rm.errors import DataError
from rm.evaluation import metrics, plots
from rm.evaluation.gather import gather_rewards, shut_down
from rm.evaluation.summary import by_subset
from rm.model.pretrained import default_max_length, load_reward_model
from rm.model.probe import choose_layout
from rm.model.reward import RewardModel
from rm.tokens.encode import encode_kept

PLOTS = ("accuracy.png", "calibration.png", "reward_hist.png", "length_bias.png")


def select_pairs(
    source: str,
    split: str,
    subsets: list[str],
    holdout: float,
    split_seed: int,
    max_pairs: int,
    on_bad_record: str = "error",
    *,
    data: DataConfig | None = None,
    tokenizer: Any = None,
    report: DataReport | None = None,
) -> tuple[list[Pair], str]:
    """The pairs to evaluate and a sentence saying which they are.

    `holdout` > 0 takes the held-out part of the same seeded, subset-stratified split that training
    makes with `data.eval_fraction=holdout data.split_seed=split_seed` (`rm.data.load.holdout_split`);
    `max_pairs` samples as training's `data.max_eval_pairs` does. So a run's own eval set is reproducible.
    `data` gives format, columns, chat template and Argilla options as training's `data.*` keys, and
    `tokenizer` (the model's) renders message lists with its chat template as training did.
    """
    cfg = replace(data or DataConfig(), on_bad_record=on_bad_record)
    pairs = load_pairs(source, split, subsets, cfg, tokenizer=tokenizer, report=report)
    how = f"`{source}`" + (f" (split `{split}`)" if not Path(source).is_file() else "")
    if holdout:
        _, pairs = holdout_split(pairs, holdout, split_seed)
        how += f", the held-out {holdout:g} of it (split seed {split_seed}, stratified by subset, as training does)"
    if max_pairs and max_pairs < len(pairs):
        pairs = random.Random(split_seed + 1).sample(pairs, max_pairs)
        how += f", a seeded sample of {max_pairs} pairs"
    return pairs, how


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


def evaluate_model(
    model: str,
    data: str,
    out: str | Path,
    *,
    split: str = "test",
    subsets: list[str] = (),
    holdout: float = 0.0,
    split_seed: int = 0,
    max_pairs: int = 0,
    batch_size: int = 16,
    max_length: int = 0,
    samples: int = 1000,
    seed: int = 0,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    on_bad_record: str = "error",
    data_cfg: DataConfig | None = None,
) -> dict:
    started = time.perf_counter()
    accelerator = Accelerator()
    # The model first: its tokenizer's chat template renders message-list data, as in training.
    reward_model, tokenizer = load_reward_model(model, dtype, trust_remote_code)
    report = DataReport(on_bad_record)
    pairs, how = select_pairs(
        data, split, list(subsets), holdout, split_seed, max_pairs, on_bad_record,
        data=data_cfg, tokenizer=tokenizer, report=report,
    )  # fmt: skip
    reward_model.to(accelerator.device)
    max_length = max_length or default_max_length(model, reward_model)

    # Training's encoder, with the position of every pair it keeps (it drops a pair whose responses alone
    # exceed max_length); each dropped one is listed in eval.json. A kept pair's index is its position among
    # the kept pairs: how gathering puts the rewards in order.
    names = sorted({p.subset for p in pairs})
    encoded, rep, positions = encode_kept(pairs, tokenizer, max_length, names)
    kept = [pairs[k] for k in positions.tolist()]
    dropped = [pairs[k].origin for k in sorted(set(range(len(pairs))) - set(positions.tolist()))]
    cut = rep.prompt_truncated
    if not kept:
        raise DataError(f"{data}: no pairs to evaluate ({len(pairs)} loaded, {len(dropped)} too long)")

    # Training's layouts: shared-prefix packing where the model reproduces separate forwards with it.
    pad = tokenizer.pad_token_id
    layout = choose_layout(reward_model, "auto", pad)[0] if isinstance(reward_model, RewardModel) else "padded"
    collate = SharedCollator(pad) if layout == "shared" else PaddedCollator(pad)
    batches = PairBatches(encoded, layout, batch_size, shuffle=False)
    loader = DataLoader(encoded, batch_sampler=batches, collate_fn=collate)
    gathered = gather_rewards(reward_model, accelerator.prepare(loader), accelerator)
    chosen, rejected = gathered["chosen"], gathered["rejected"]
    if len(chosen) != len(kept):  # each pair exactly once, or the numbers below would be wrong
        raise RuntimeError(f"gathered {len(chosen)} rewards for {len(kept)} pairs")
    if not accelerator.is_main_process:
        shut_down(accelerator)  # a clean process-group exit (gloo can abort at interpreter exit otherwise)
        return {}

    c, r = chosen.double().numpy(), rejected.double().numpy()
    result = build_result(kept, c, r, samples, seed)
    result["eval"] = {
        "model": model,
        "data": how,
        "pairs_loaded": len(pairs),
        "records_skipped": report.skipped_counts(),
        "skipped": [{"origin": b.origin, "reason": b.reason} for b in report.skipped],
        "pairs_dropped_too_long": len(dropped),
        "dropped": dropped,
        "prompts_truncated": cut,
        "max_length": max_length,
        "length_unit": "characters of the response",
        "bootstrap": {"samples": samples, "seed": seed, "level": 0.95, "method": "percentile"},
        "calibration_bins": len(result["calibration"]["bins"]),
        "processes": accelerator.num_processes,
        "seconds": round(time.perf_counter() - started, 1),
        "plots": list(PLOTS),
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(metrics.json_safe(result), indent=2) + "\n")
    with open(out / "rewards.jsonl", "w", encoding="utf-8") as f:
        for p, rc, rr in zip(kept, c.tolist(), r.tolist(), strict=True):
            row = {"origin": p.origin, "subset": p.subset, "chosen_reward": rc, "rejected_reward": rr}
            f.write(json.dumps(row | {"chosen_chars": len(p.chosen), "rejected_chars": len(p.rejected)}) + "\n")
    subset_of = np.array([p.subset for p in kept])
    by_subset = {n: (c[subset_of == n], r[subset_of == n]) for n in result["subsets"]}
    lengths = tuple(np.array([len(getattr(p, k)) for p in kept], dtype=float) for k in ("chosen", "rejected"))
    plots.accuracy_plot(result, out / PLOTS[0])
    plots.calibration_plot(result, out / PLOTS[1])
    plots.reward_hist_plot(by_subset, result, out / PLOTS[2])
    plots.length_plot(result, (c, r, *lengths), out / PLOTS[3], seed=seed)
    (out / "report.md").write_text(render_markdown(result))
    shut_down(accelerator)
    return result


def _rows(result: dict) -> list[tuple[str, dict]]:
    return list(result["subsets"].items()) + [("overall", result["overall"])]


def format_table(result: dict) -> str:
    """The console summary: one line per subset and overall."""
    rows = _rows(result)
    w = max(7, *(len(name) for name, _ in rows))
    head = (
        f"{'subset':<{w}}      n  accuracy  95% CI            ECE     longer-wins  length rule            "
        "rho(reward,len)"
    )
    lines = [head, "-" * len(head)]
    for name, m in rows:
        lo, hi = m["accuracy_ci95"]
        rule = f"{m['length_rule']} {m['length_rule_accuracy']:.4f}"
        lines.append(
            f"{name:<{w}}  {m['n']:5d}  {m['accuracy']:8.4f}  [{lo:.4f}, {hi:.4f}]  {m['ece']:.4f}  "
            f"{m['longer_chosen_rate']:11.4f}  {rule:<21}  {m['reward_length_spearman']:15.4f}"
        )
    return "\n".join(lines)


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def render_markdown(result: dict) -> str:
    e = result["eval"]
    o = result["overall"]
    md = [
        "# Reward model evaluation",
        "",
        f"- model: `{e['model']}`",
        f"- data: {e['data']}",
        f"- pairs: {o['n']} scored of {e['pairs_loaded']} loaded; {e['pairs_dropped_too_long']} dropped because "
        f"their responses alone exceed max_length={e['max_length']} tokens (listed in eval.json); "
        f"{e['prompts_truncated']} prompts lost leading turns to fit",
        f"- bad records skipped (--on-bad-record skip): {sum(e['records_skipped'].values())} "
        f"{e['records_skipped'] or ''} (listed in eval.json)",
        f"- intervals: {e['bootstrap']['method']} bootstrap, {e['bootstrap']['samples']} resamples, seed "
        f"{e['bootstrap']['seed']}; lengths in {e['length_unit']}",
        "",
        "## Accuracy",
        "",
        "A pair is right when r_chosen > r_rejected (a tie counts half). *Longer wins* is how often the chosen",
        "response is the longer one; the *length rule* is the better of always picking the longer or always the",
        "shorter response. A reward model should beat the length rule by more than its interval.",
        "",
        "| subset | n | accuracy | 95% CI | ECE | longer wins | length rule | beats it? | acc. when chosen "
        "longer (n) | acc. when chosen shorter (n) |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for name, m in _rows(result):
        lo, hi = m["accuracy_ci95"]
        beats = "yes" if lo > m["length_rule_accuracy"] else "no (within or below the CI)"
        md.append(
            f"| {name} | {m['n']} | {_f(m['accuracy'])} | [{_f(lo)}, {_f(hi)}] | {_f(m['ece'])} | "
            f"{_f(m['longer_chosen_rate'])} | {m['length_rule']}: {_f(m['length_rule_accuracy'])} | {beats} | "
            f"{_f(m['accuracy_chosen_longer'])} ({m['n_chosen_longer']}) | "
            f"{_f(m['accuracy_chosen_shorter'])} ({m['n_chosen_shorter']}) |"
        )
    md += ["", "![accuracy per subset](accuracy.png)", "", "## Calibration", ""]
    md += [
        "P(chosen) = sigmoid(r_chosen - r_rejected). Confidence is max(P, 1 - P), binned on [0.5, 1]; ECE is the",
        "pair-weighted mean |accuracy - confidence| over the bins (0 is perfectly calibrated).",
        "",
        "| confidence bin | pairs | mean confidence | accuracy |",
        "| --- | ---: | ---: | ---: |",
    ]
    md += [
        f"| {b['lo']:.2f}-{b['hi']:.2f} | {b['n']} | {_f(b['confidence'])} | {_f(b['accuracy'])} |"
        for b in result["calibration"]["bins"]
        if b["n"]
    ]
    md += ["", "![reliability diagram](calibration.png)", "", "## Rewards", "", "![reward histograms](reward_hist.png)"]
    md += [
        "",
        "## Length bias",
        "",
        f"Over all pairs the chosen response is the longer one in {_f(o['longer_chosen_rate'])} of them. The model",
        f"scores the longer response higher in {_f(o['prefers_longer_rate'])} of the pairs of unequal length, and",
        f"its rewards have Spearman rho = {_f(o['reward_length_spearman'])} with response length.",
        "",
        "| len(chosen) - len(rejected) | pairs | RM accuracy | longer wins |",
        "| --- | ---: | ---: | ---: |",
    ]
    md += [
        f"| {b['lo']:+.0f} to {b['hi']:+.0f} | {b['n']} | {_f(b['accuracy'])} | {_f(b['longer_chosen_rate'])} |"
        for b in result["length_bins"]["overall"]
    ]
    md += ["", "![length bias](length_bias.png)", ""]
    return "\n".join(md)
