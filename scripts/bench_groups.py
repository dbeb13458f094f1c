"""Grouped training against binarized pairs, at equal pairs per step: TRL's RewardTrainer and rm, interleaved.

    python scripts/bench_groups.py                        # every train group that fits (~1,750 groups, long)
    python scripts/bench_groups.py --limit 400            # 400 groups, 2,400 ordered pairs per mode
    python scripts/bench_groups.py --limit 24 --slice 3   # a quick smoke run

Data: `scripts/make_group_data.py` turns each real harmless-base pair into a group of four
responses (chosen > rejected > another prompt's chosen > another prompt's rejected), so every group holds
C(4, 2) = 6 strictly ordered pairs, and writes the same groups binarized (all 6 pairs, as trainers that take
pairs only need them) and the held-out prompts' original HH pairs. Texts are read by rm's own loader and
tokenized with a BPE trained on the training texts, on the library's own path (`benchlib.prepare`); a group is
kept only if every response fits 512 tokens with the whole prompt, a held-out pair likewise, so every mode trains
on the same token ids.

Modes, all one epoch at 12 ordered pairs per optimizer step (the same steps in every mode), the random-init
Llama of `bench_train.py` (`--size`), lr 1e-4 with linear decay, fp32:
- trl, trl-grouped: TRL's RewardTrainer on the binarized pairs, 12 pairs a step, random batches / its
  length-grouped sampler (bench_train.py's worker, taken whole: its batches in a seeded random order);
- rm-shared-pairs: rm's shared layout on the same binarized pairs, 12 pairs a step, length-grouped;
- rm-shared-groups: rm's shared layout on the groups, 2 groups a step, each one packed segment
  `[prompt | r1 | r2 | r3 | r4]`, trained by `preference_loss` with `LossConfig()` (pairwise, each group
  weighing 1: with 6 pairs in every group, the mean over the step's 12 pairs, as in the pairwise modes).
pairs counts strictly ordered pairs trained (6 a group). pairs/s is, as in bench_train.py, the median over
turns of each turn's computed FLOPs per second in the mode's own pairs (`benchlib.mode_rates`), min-max
beside it, `raw` the median of the raw per-turn pairs/s and `epoch` the whole epoch's pairs over its
running time. slots are the token positions computed, padding included. The token ceiling of groups over
pairs is rm-shared-pairs' slots per pair over rm-shared-groups': the speed-up sharing a prompt by 4
responses instead of 2 allows if a slot cost the same in both. Held-out accuracy is every mode's, after
its epoch, on the original HH pairs of the held-out prompts. Needs TRL for the trl modes (pip install -e
'.[bench]'); without it, run `--modes rm-shared-pairs,rm-shared-groups`.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import benchlib
import torch

LR = 1e-4
PAIRS_PER_STEP = 12
K = 4
PAIRS_PER_GROUP = K * (K - 1) // 2
MAX_LENGTH = 512
VOCAB = 8192
# mode -> rm's collator layout and the training data it reads, or "trl" (bench_train.py's worker)
MODES = {
    "trl": ("trl", "pairs"),
    "trl-grouped": ("trl", "pairs"),
    "rm-shared-pairs": ("shared", "pairs"),
    "rm-shared-groups": ("shared", "groups"),
}
PAIRS_MODE, GROUPS_MODE = "rm-shared-pairs", "rm-shared-groups"


@dataclass
class GroupData:
    """Token ids every mode uses: the groups, the same groups as pairs, and the held-out pairs."""

    groups: list[dict]
    """{"prompt": ids, "responses": [ids, ...]} per training group, best response first."""
    pairs: list[dict]
    """{"prompt", "chosen", "rejected": ids}: each group's 6 ordered pairs, group after group."""
    eval: list[dict]
    """{"prompt", "chosen", "rejected": ids} per held-out HH pair."""
    dropped: int
    """Groups and held-out pairs left out because some response does not fit `MAX_LENGTH` with the whole prompt."""
    refused: int
    """Groups of make_group_data.py's file left out because rm's loader refused them (or one of their pairs)."""


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _line_of(origin: str) -> int:
    """The 0-based line of a "file:line" origin (rm's loader counts lines from 1)."""
    return int(origin.rsplit(":", 1)[1]) - 1


def group_data(data: Path, work: Path, limit: int, seed: int) -> GroupData:
    """Write the benchmark's data under `work`: make_group_data.py's files from `data`, read back by rm's loader,
    the BPE, and two hh-rlhf-layout folders (`groups/`, `pairs/`) holding the kept groups, or their pairs, for
    training and the kept held-out pairs for evaluation. `limit` keeps that many groups (seeded) (0: all)."""
    import make_group_data

    from rm.data.formats.group import Group

    source = work / "source"
    make_group_data.write(source, source=data)
    files = {name: source / name / f"{split}.jsonl" for name, split in (("groups", "train"), ("pairs", "train"))}
    files["heldout"] = source / "heldout" / "test.jsonl"
    raw = {name: _lines(path) for name, path in files.items()}
    # A record rm refuses (an empty answer: 4 real HH pairs have one, and make_group_data.py may lend one to
    # another group as an off-topic answer) is counted by rm's loader and left out of every mode.
    loaded = {name: benchlib.load_examples(path) for name, path in files.items()}
    held = loaded["heldout"]
    pairs_at = {_line_of(p.origin): p for p in loaded["pairs"]}
    groups = []
    for g in loaded["groups"]:
        # the binarized file holds each group's pairs at its lines 6n..6n+5, and rm must read them as the
        # group's prompt and responses (the prompt split the same way); a group whose pairs differ is left out
        assert isinstance(g, Group) and list(g.rank) == list(range(K)), g.origin
        lines = range(PAIRS_PER_GROUP * _line_of(g.origin), PAIRS_PER_GROUP * (_line_of(g.origin) + 1))
        got = [(p.prompt, p.chosen, p.rejected) if (p := pairs_at.get(n)) else None for n in lines]
        if got == [(g.prompt, g.responses[a], g.responses[b]) for a, b in combinations(range(K), 2)]:
            groups.append(g)
    refused = len(raw["groups"]) - len(groups)

    # The BPE learns the kept groups' texts; a group or held-out pair rm would change to fit is left out.
    fitted = benchlib.prepare(groups, {"groups": groups, "heldout": held}, work, VOCAB, MAX_LENGTH).fitted
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    kept, dropped = [], 0
    for i in order:
        ids = fitted["groups"][i]
        if ids is None:
            dropped += 1
        elif not limit or len(kept) < limit:
            kept.append((i, ids))
    held_kept = [(p, ids) for p, ids in zip(held, fitted["heldout"], strict=True) if ids is not None]
    dropped += len(held) - len(held_kept)

    held_lines = [raw["heldout"][_line_of(p.origin)] for p, _ in held_kept]
    group_lines = [raw["groups"][_line_of(groups[i].origin)] for i, _ in kept]
    first = [PAIRS_PER_GROUP * _line_of(groups[i].origin) for i, _ in kept]
    pair_lines = [raw["pairs"][n + j] for n in first for j in range(PAIRS_PER_GROUP)]
    for name, train in (("groups", group_lines), ("pairs", pair_lines)):
        folder = work / name / "harmless-base"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "train.jsonl").write_text("\n".join(train) + "\n", encoding="utf-8")
        (folder / "test.jsonl").write_text("\n".join(held_lines) + "\n", encoding="utf-8")
    group_ids = [ids for _, ids in kept]
    pair_ids = [
        {"prompt": g["prompt"], "chosen": g["responses"][a], "rejected": g["responses"][b]}
        for g in group_ids
        for a, b in combinations(range(K), 2)
    ]
    eval_ids = [benchlib.as_pair(ids) for _, ids in held_kept]
    # bench_train.py's TRL worker reads "train" (pairs) and "eval" from here (benchlib.load_ids).
    (work / "ids.json").write_text(json.dumps({"train": pair_ids, "eval": eval_ids, "groups": group_ids}))
    return GroupData(group_ids, pair_ids, eval_ids, dropped, refused)


def rm_worker(mode: str, work: Path, seed: int, budget: int) -> None:
    from rm.config import load_config
    from rm.training.run import main

    progress = benchlib.Progress(work / f"{mode}.progress")
    layout, data = MODES[mode]
    batch = PAIRS_PER_STEP // PAIRS_PER_GROUP if data == "groups" else PAIRS_PER_STEP
    overrides = benchlib.rm_overrides(work, mode, work / data, layout, batch, budget, seed, LR, grouped=True)
    started = False

    def on_batch(batch: dict, loss: torch.Tensor) -> None:
        nonlocal started
        if not started:  # the first step pays for allocation and warm-up: not timed
            started = True
            benchlib.pause_until_conducted()
            return
        rows, width = batch["input_ids"].shape
        real = int((batch["pair_ids"] >= 0).sum())
        # pairs: the strictly ordered pairs the step trained (6 per group, 1 per pair)
        progress.step(len(batch["better"]), real, rows * width, loss.item(), scores=rows * width * width)

    result = main(load_config(None, overrides), on_batch=on_batch)
    progress.finish(
        accuracy=result["overall"]["accuracy"], n_eval=result["overall"]["n"], steps=result["train"]["steps"]
    )


def trl_worker(mode: str, work: Path, seed: int) -> None:
    """bench_train.py's TRL worker as it is (its sampler, counting and held-out scoring), at 12 pairs a step."""
    import bench_train

    bench_train.BATCH = PAIRS_PER_STEP
    bench_train.trl_worker(mode, work, seed)


def report(work: Path, modes: list[str], turns: dict, peaks: list[float], n_pairs: int) -> dict:
    from transformers import AutoConfig

    n_params = benchlib.non_embedding_params()
    cfg = AutoConfig.for_model("llama", **benchlib.MODEL)

    def computed(d: dict) -> float:
        return benchlib.computed_flops(d.get("slots", 0), d.get("scores", 0), n_params, cfg.num_hidden_layers,
                                       cfg.hidden_size)  # fmt: skip

    rows = benchlib.mode_rates(work, modes, turns, computed)
    head = (
        f"{'mode':<17} {'pairs/s':>7} {'min-max':>11} {'raw':>6} {'epoch':>6} {'slots/s':>8} {'slots/pair':>10} "
        f"{'peak RSS':>8} {'held-out acc':>14} {'steps':>5} {'pairs/step':>10} {'turns':>5}"
    )
    print(head)
    print("-" * len(head))
    for m, r in rows.items():
        r["pairs_per_step"] = n_pairs / r["steps"] if r.get("steps") else float("nan")
        r["se"] = benchlib.accuracy_se(r["accuracy"], r["n_eval"])
        print(
            f"{m:<17} {r['pairs_per_s']:7.2f} {r['pairs_per_s_min']:5.1f}-{r['pairs_per_s_max']:<5.1f} "
            f"{r['raw_pairs_per_s']:6.2f} {r['overall_pairs_per_s']:6.2f} {r['slots_per_s']:8.0f} "
            f"{r['slots_per_pair']:10.1f} {r['peak_rss_mb']:6.0f}MB {r['accuracy']:7.4f}±{r['se']:.4f} "
            f"{r['steps']:5d} {r['pairs_per_step']:10.2f} {r['turns']:5d}"
        )
    print(f"\nmatmul peak (fp32, 1024^2, median of {len(peaks)}): {statistics.median(peaks):.1f} GFLOP/s "
          f"(min {min(peaks):.1f}, max {max(peaks):.1f}); held-out pairs {rows[modes[0]]['n_eval']}")  # fmt: skip
    for line in verdicts(rows):
        print(line)
    return rows


def ceiling(rows: dict) -> dict:
    """Groups over pairs in rm's shared layout: the token and FLOP ceilings and the measured speed-ups."""
    pairs, groups = rows[PAIRS_MODE], rows[GROUPS_MODE]
    out = {
        "token_ceiling": pairs["slots_per_pair"] / groups["slots_per_pair"],
        "flop_ceiling": pairs["computed_flops_per_pair"] / groups["computed_flops_per_pair"],
    }
    for name, key in (("", "pairs_per_s"), ("_raw", "raw_pairs_per_s"), ("_epoch", "overall_pairs_per_s")):
        out[f"speedup{name}"] = groups[key] / pairs[key]
        out[f"fraction{name}"] = out[f"speedup{name}"] / out["token_ceiling"]
    out["fraction_of_flop_ceiling"] = out["speedup"] / out["flop_ceiling"]
    return out


def verdicts(rows: dict) -> list[str]:
    """The acceptance figures, each printed with its target."""
    lines = []
    if PAIRS_MODE in rows and GROUPS_MODE in rows:
        c = ceiling(rows)
        p, g = rows[PAIRS_MODE], rows[GROUPS_MODE]
        lines.append(
            f"groups over pairs (rm shared): token ceiling {c['token_ceiling']:.3f}x ({p['slots_per_pair']:.1f} / "
            f"{g['slots_per_pair']:.1f} slots per pair); measured {c['speedup']:.3f}x = {c['fraction']:.1%} of it "
            f"(target >= 85%: {'met' if c['fraction'] >= 0.85 else 'MISSED'}); raw turn medians {c['speedup_raw']:.3f}x"
            f" = {c['fraction_raw']:.1%}; whole epoch {c['speedup_epoch']:.3f}x = {c['fraction_epoch']:.1%}"
        )
        lines.append(
            f"  FLOP ceiling {c['flop_ceiling']:.3f}x (computed FLOPs per pair, attention over each row's whole "
            f"width: pairs {p['computed_flops_per_pair'] / 1e9:.3f} G, groups {g['computed_flops_per_pair'] / 1e9:.3f}"
            f" G); measured = {c['fraction_of_flop_ceiling']:.1%} of it"
        )
    if GROUPS_MODE in rows:
        g = rows[GROUPS_MODE]
        for trl, target in (("trl", 5.0), ("trl-grouped", None)):
            if trl in rows:
                ratio = g["pairs_per_s"] / rows[trl]["pairs_per_s"]
                epoch = g["overall_pairs_per_s"] / rows[trl]["overall_pairs_per_s"]
                goal = f" (target >= {target:g}x: {'met' if ratio >= target else 'MISSED'})" if target else ""
                lines.append(f"groups over {trl}: {ratio:.2f}x{goal}; whole epoch {epoch:.2f}x")
    names = list(rows)
    gaps = []
    for a, b in combinations(names, 2):
        diff = rows[b]["accuracy"] - rows[a]["accuracy"]
        se = (rows[a]["se"] ** 2 + rows[b]["se"] ** 2) ** 0.5  # of the difference, the two taken as independent
        gaps.append((a, b, diff, se))
    outside = [(a, b, d) for a, b, d, se in gaps if abs(d) > 2 * se]
    # "groups better": every gap wider than 2 SE is rm-shared-groups ahead of another mode
    better = bool(outside) and all(GROUPS_MODE in (a, b) and (d > 0) == (b == GROUPS_MODE) for a, b, d in outside)
    if gaps:
        a, b, d, se = max(gaps, key=lambda t: abs(t[2]) - 2 * t[3])  # the furthest beyond (or nearest) 2 SE
        verdict = "all within 2 SE of each other" if not outside else ("groups better" if better else "NOT within 2 SE")
        lines.append(f"held-out accuracy: {verdict} (widest gap {b} - {a} = {d:+.4f}, 2 SE of the difference "
                     f"{2 * se:.4f})")  # fmt: skip
    return lines


def summary(rows: dict) -> str:
    """The final JSON line: pairs/s per mode (and by whole epoch), the ratios the targets are stated in."""
    line: dict = {"pairs_per_s": {m: round(r["pairs_per_s"], 3) for m, r in rows.items()}}
    line["epoch_pairs_per_s"] = {m: round(r["overall_pairs_per_s"], 3) for m, r in rows.items()}
    line["slots_per_pair"] = {m: round(r["slots_per_pair"], 2) for m, r in rows.items()}
    line["accuracy"] = {m: round(r["accuracy"], 4) for m, r in rows.items()}
    line["steps"] = {m: r["steps"] for m, r in rows.items()}
    line["n_eval"] = {m: r["n_eval"] for m, r in rows.items()}
    if GROUPS_MODE in rows:
        for trl in ("trl", "trl-grouped"):
            if trl in rows:
                line[f"groups_over_{trl.replace('-', '_')}"] = round(
                    rows[GROUPS_MODE]["pairs_per_s"] / rows[trl]["pairs_per_s"], 3
                )
    if PAIRS_MODE in rows and GROUPS_MODE in rows:
        line |= {k: round(v, 3) for k, v in ceiling(rows).items()}
    return json.dumps(line)


def main() -> None:
    ap = benchlib.arguments(__doc__, "bench_groups", budget=1536, slice_s=8.0)
    ap.set_defaults(modes=",".join(MODES))
    ap.add_argument(
        "--size", choices=sorted(benchlib.SIZES), default="small", help="model width (small ~5M, medium ~30M)"
    )
    args = ap.parse_args()
    benchlib.set_size(args.size)
    torch.set_num_threads(2)
    if args.worker:
        if MODES[args.worker][0] == "trl":
            trl_worker(args.worker, args.work, args.seed)
        else:
            rm_worker(args.worker, args.work, args.seed, args.budget)
        return
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(MODES)})")
    bench = group_data(args.data, args.work, args.limit, args.seed)
    print(f"{len(bench.groups)} train groups of {K} ({len(bench.pairs)} ordered pairs) / {len(bench.eval)} held-out "
          f"pairs ({bench.dropped} longer than {MAX_LENGTH} and {bench.refused} refused groups left out)")  # fmt: skip
    print(f"model: {args.size} {benchlib.MODEL}")
    for m in modes:
        (args.work / f"{m}.progress").unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--work", str(args.work), "--seed", str(args.seed), "--budget", str(args.budget)]
    cmd += ["--size", args.size]
    commands = {m: cmd + ["--worker", m] for m in modes}
    turns, peaks = benchlib.conduct(commands, args.work, args.slice, total_pairs=len(bench.pairs))
    (args.work / "turns.json").write_text(json.dumps({"turns": turns, "peaks": peaks}))
    rows = report(args.work, modes, turns, peaks, len(bench.pairs))
    print(summary(rows))


if __name__ == "__main__":
    main()
