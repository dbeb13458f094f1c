"""Training throughput at equal work per step: TRL's RewardTrainer and rm's layouts, interleaved.

    python scripts/bench_train.py                          # one epoch of ~1,850 real HH pairs per mode
    python scripts/bench_train.py --size medium            # the same with a ~30M-parameter Llama
    python scripts/bench_train.py --limit 200 --slice 4    # a quick smoke run

Modes (all: 8 pairs per optimizer step, the same optimizer steps, the same random-init Llama — small:
hidden 256, 4 layers, ~5M parameters; medium: hidden 512, 8 layers, ~30M — on the same token ids of
the same real harmless-base pairs, one epoch, lr 1e-4, linear decay, no warm-up, fp32, gradient
checkpointing off; every worker keeps the memory a step frees for the next, as rm's training loop does on
the CPU, `rm/data/heap.py`, TRL's included):
- trl, trl-grouped: TRL's RewardTrainer, random batches / `train_sampling_strategy="group_by_length"`
  (TRL's own length-grouped batches, taken in a seeded random order: see `shuffled_batches`);
- rm-padded, rm-padded-grouped: rm's padded layout (two rows a pair), random / length-grouped batches;
- rm-packed: padding-free packing with the prompt duplicated (`collator.layout=packed`), length-grouped;
- rm-shared: the shared-prefix layout (`collator.layout=shared`), length-grouped.
pairs/s is the median over turns of each turn's computed FLOPs per second, in the mode's own pairs
(its whole epoch's pairs per FLOP: `benchlib.rates`), min-max beside it: a turn's raw pairs/s also
depends on which pairs it drew, so `raw` (the median of those) moves with the data. `epoch` is the
whole epoch's pairs over its running time. A mode ahead of the others skips rounds, so every mode
runs in every phase of the run and all finish together (`benchlib.due`). Every length-grouped mode
takes its batches in a random order. Columns mean the
same in every mode: useful tokens count each prompt once (so useful tok/s is pairs/s times this data's
useful tokens per pair); slots are the token positions the model computed, padding included. The run
also prints the ceiling of sharing over packing on this data (packed slots per pair over shared slots
per pair) and how much of it rm shared's measured speed-up over rm packed reaches, and the same for the
FLOPs each computed (attention over each row's whole width, as the CPU kernels do; `benchlib.computed_flops`).
See benchlib.py for how the modes are interleaved. Needs TRL: pip install -e '.[bench]'.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import benchlib
import torch

LR = 1e-4
BATCH = 8
# mode -> (layout or "trl", length-grouped batches)
MODES = {
    "trl": ("trl", False),
    "trl-grouped": ("trl", True),
    "rm-padded": ("padded", False),
    "rm-padded-grouped": ("padded", True),
    "rm-packed": ("packed", True),
    "rm-shared": ("shared", True),
}


def rm_worker(mode: str, work: Path, seed: int, budget: int) -> None:
    from rm.config import load_config
    from rm.training.run import main

    progress = benchlib.Progress(work / f"{mode}.progress")
    layout, grouped = MODES[mode]
    overrides = benchlib.rm_overrides(work, mode, work / "hh", layout, BATCH, budget, seed, LR, grouped)
    started = False

    def on_batch(batch: dict, loss: torch.Tensor) -> None:
        nonlocal started
        if not started:  # the first step pays for allocation and warm-up: not timed
            started = True
            benchlib.pause_until_conducted()
            return
        real = (batch["pair_ids"] >= 0).sum() if "pair_ids" in batch else batch["attention_mask"].sum()
        rows, width = batch["input_ids"].shape
        progress.step(len(batch["subset_ids"]), int(real), rows * width, loss.item(), scores=rows * width * width)

    result = main(load_config(None, overrides), on_batch=on_batch)
    progress.finish(
        accuracy=result["overall"]["accuracy"], n_eval=result["overall"]["n"], steps=result["train"]["steps"]
    )


def shuffled_batches(sampler, batch_size: int, seed: int):
    """`sampler`'s indices with its full batches in a seeded random order (the last, partial one stays last).

    The batches are the sampler's own, so the padding and the work are TRL's. Only the order changes:
    transformers' `LengthGroupedSampler` sorts each 50-batch megabatch longest first, so an 8-second turn
    drew only long or only short pairs (200 to 680 slots a pair per turn in one run) and the median over
    turns measured the lengths drawn rather than the speed; rm's planner shuffles its batches already.
    """
    import random

    from torch.utils.data import Sampler

    class Shuffled(Sampler[int]):
        def __len__(self) -> int:
            return len(sampler)

        def __iter__(self):
            order = list(sampler)
            batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
            full = batches if len(batches[-1]) == batch_size else batches[:-1]
            random.Random(seed).shuffle(full)
            rest = batches[len(full) :]
            return iter([i for b in full + rest for i in b])

    return Shuffled()


def trl_worker(mode: str, work: Path, seed: int) -> None:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    from rm.collate.padded import PaddedCollator
    from rm.collate.planner import PairBatches
    from rm.data.heap import hold_freed_memory
    from rm.evaluation.summary import summarize
    from rm.model.reward import RewardModel, pair_rewards
    from rm.tokens.store import EncodedGroup

    progress = benchlib.Progress(work / f"{mode}.progress")
    grouped = MODES[mode][1]
    tok = AutoTokenizer.from_pretrained(work / "tokenizer")
    ids = benchlib.load_ids(work)
    train = Dataset.from_dict(
        {
            "chosen_ids": [p["prompt"] + p["chosen"] for p in ids["train"]],
            "rejected_ids": [p["prompt"] + p["rejected"] for p in ids["train"]],
            # what length-grouped sampling sorts by: the longer of the two sequences
            "length": [len(p["prompt"]) + max(len(p["chosen"]), len(p["rejected"])) for p in ids["train"]],
        }
    )
    model = benchlib.random_model(len(tok), tok.pad_token_id, tok.eos_token_id, seed)
    args = RewardConfig(
        output_dir=str(work / "trl"),
        per_device_train_batch_size=BATCH,
        num_train_epochs=1,
        learning_rate=LR,
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        max_length=512,
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1000000,
        disable_tqdm=True,
        seed=seed,
        dataloader_num_workers=0,
        train_sampling_strategy="group_by_length" if grouped else "random",
        remove_unused_columns=False,  # keep `length` for the sampler (the collator reads only the ids)
    )
    counts = {"pairs": 0, "tokens": 0, "slots": 0, "scores": 0, "loss": 0.0, "steps": 0}

    class Counting(RewardTrainer):
        def _get_train_sampler(self, train_dataset=None):
            inner = super()._get_train_sampler(train_dataset)
            return shuffled_batches(inner, BATCH, seed) if grouped else inner

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            counts["pairs"] += inputs["input_ids"].shape[0] // 2
            counts["tokens"] += int(inputs["attention_mask"].sum())
            counts["slots"] += inputs["input_ids"].numel()
            counts["scores"] += inputs["input_ids"].numel() * inputs["input_ids"].shape[1]
            counts["loss"] = (out[0] if return_outputs else out).item()
            return out

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            counts["steps"] += 1
            if counts["steps"] == 1:  # as for rm: the first step is not timed
                benchlib.pause_until_conducted()
            else:
                progress.step(counts["pairs"], counts["tokens"], counts["slots"], counts["loss"], counts["scores"])
            counts.update(pairs=0, tokens=0, slots=0, scores=0)

    trainer = Counting(model=model, args=args, train_dataset=train, processing_class=tok, callbacks=[Clock()])
    hold_freed_memory()  # the allocator setting rm's loop makes on the CPU: the modes differ in layout only
    trainer.train()
    # Held-out accuracy measured the same way for every mode: rm's padded scoring of the same ids.
    held = [EncodedGroup.pair(p["prompt"], p["chosen"], p["rejected"], 0, index=i) for i, p in enumerate(ids["eval"])]
    scorer = RewardModel(trainer.model).eval()
    collate = PaddedCollator(tok.pad_token_id)
    chosen, rejected = [], []
    with torch.no_grad():
        for b in PairBatches(held, "padded", 32, shuffle=False):
            c, r = pair_rewards(scorer, collate([held[i] for i in b]))
            chosen.append(c)
            rejected.append(r)
    summary = summarize(torch.cat(chosen), torch.cat(rejected))
    progress.finish(accuracy=summary["accuracy"], n_eval=summary["n"], steps=counts["steps"])


def report(work: Path, modes: list[str], turns: dict, peaks: list[float], prep_pairs: list[dict]) -> dict:
    from transformers import AutoConfig

    n_params = benchlib.non_embedding_params()
    cfg = AutoConfig.for_model("llama", **benchlib.MODEL)
    layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    flops_per_pair = benchlib.useful_flops(prep_pairs, n_params, layers, hidden, True)
    flops_per_pair /= len(prep_pairs)
    useful_per_pair = statistics.mean(len(p["prompt"]) + len(p["chosen"]) + len(p["rejected"]) for p in prep_pairs)
    peak = statistics.median(peaks) * 1e9

    def computed(d: dict) -> float:
        return benchlib.computed_flops(d.get("slots", 0), d.get("scores", 0), n_params, layers, hidden)

    rows = {m: benchlib.rates(work / f"{m}.progress", turns[m], computed) for m in modes}
    for r in rows.values():  # the headline: per-turn work in the mode's pairs (see benchlib.rates)
        r["raw_pairs_per_s"] = r["pairs_per_s"]
        r["pairs_per_s"], r["pairs_per_s_min"], r["pairs_per_s_max"] = (
            r["work_pairs_per_s"],
            r["work_pairs_per_s_min"],
            r["work_pairs_per_s_max"],
        )
    head = (
        f"{'mode':<18} {'pairs/s':>7} {'min-max':>11} {'raw':>6} {'epoch':>6} {'useful tok/s':>12} {'slots/s':>8} "
        f"{'slots/pair':>10} {'peak RSS':>8} {'held-out acc':>14} {'steps':>5} {'pairs/step':>10} "
        f"{'MFU':>6} {'turns':>5}"
    )
    print(head)
    print("-" * len(head))
    for m, r in rows.items():
        last = benchlib._last(work / f"{m}.progress")
        r["slots_per_pair"] = last["slots"] / last["pairs"] if last.get("pairs") else float("nan")
        r["computed_flops_per_pair"] = computed(last) / last["pairs"] if last.get("pairs") else float("nan")
        r["pairs_per_step"] = len(prep_pairs) / r["steps"] if r.get("steps") else float("nan")
        r["mfu"] = r["pairs_per_s"] * flops_per_pair / peak
        se = (r["accuracy"] * (1 - r["accuracy"]) / max(1, r["n_eval"])) ** 0.5
        print(
            f"{m:<18} {r['pairs_per_s']:7.2f} {r['pairs_per_s_min']:5.1f}-{r['pairs_per_s_max']:<5.1f} "
            f"{r['raw_pairs_per_s']:6.2f} {r['overall_pairs_per_s']:6.2f} "
            f"{r['pairs_per_s'] * useful_per_pair:12.0f} {r['slots_per_s']:8.0f} {r['slots_per_pair']:10.1f} "
            f"{r['peak_rss_mb']:6.0f}MB {r['accuracy']:7.4f}±{se:.4f} {r['steps']:5d} {r['pairs_per_step']:10.2f} "
            f"{r['mfu']:6.1%} {r['turns']:5d}"
        )
    print(f"\nmatmul peak (fp32, 1024^2, median of {len(peaks)}): {statistics.median(peaks):.1f} GFLOP/s "
          f"(min {min(peaks):.1f}, max {max(peaks):.1f}); useful FLOPs per pair {flops_per_pair / 1e9:.2f} GFLOP "
          f"(prompt counted once, forward + backward); useful tokens per pair {useful_per_pair:.1f}")  # fmt: skip
    if "rm-packed" in rows and "rm-shared" in rows:
        packed, shared = rows["rm-packed"], rows["rm-shared"]
        ceiling = packed["slots_per_pair"] / shared["slots_per_pair"]
        speedup = shared["pairs_per_s"] / packed["pairs_per_s"]
        raw = shared["raw_pairs_per_s"] / packed["raw_pairs_per_s"]
        epoch = shared["overall_pairs_per_s"] / packed["overall_pairs_per_s"]
        print(f"sharing over packing: token-count ceiling {ceiling:.3f}x (packed slots / shared slots per pair); "
              f"measured {speedup:.3f}x = {speedup / ceiling:.1%} of the ceiling (raw turn medians {raw:.3f}x = "
              f"{raw / ceiling:.1%}; whole epoch {epoch:.3f}x = {epoch / ceiling:.1%})")  # fmt: skip
        flops = packed["computed_flops_per_pair"] / shared["computed_flops_per_pair"]
        print(f"  FLOP ceiling {flops:.3f}x (computed FLOPs per pair, attention over each row's whole width as the "
              f"kernels compute it: packed {packed['computed_flops_per_pair'] / 1e9:.2f} G, shared "
              f"{shared['computed_flops_per_pair'] / 1e9:.2f} G); measured = {speedup / flops:.1%} of it")  # fmt: skip
    return rows


def extra_summary(rows: dict) -> dict:
    """The keys the final JSON line adds to benchlib.summary_line's."""
    speed = {m: r["pairs_per_s"] for m, r in rows.items()}
    extra = {"pairs_per_step": {m: round(r["pairs_per_step"], 3) for m, r in rows.items()}}
    # The whole epoch's pairs over its running time: length-grouped modes vary a lot from turn to turn
    # (a turn of short pairs is fast), so their per-turn median is the less stable figure.
    extra["epoch_pairs_per_s"] = {m: round(r["overall_pairs_per_s"], 3) for m, r in rows.items()}
    extra["raw_turn_median_pairs_per_s"] = {m: round(r["raw_pairs_per_s"], 3) for m, r in rows.items()}
    extra |= {"packed_pairs_per_s": round(speed.get("rm-packed", float("nan")), 3)}
    extra |= {"trl_grouped_pairs_per_s": round(speed.get("trl-grouped", float("nan")), 3)}
    if "rm-packed" in rows and "rm-shared" in rows:
        ceiling = rows["rm-packed"]["slots_per_pair"] / rows["rm-shared"]["slots_per_pair"]
        extra["ceiling_shared_over_packed"] = round(ceiling, 3)
        extra["shared_over_packed"] = round(speed["rm-shared"] / speed["rm-packed"], 3)
        extra["fraction_of_ceiling"] = round(extra["shared_over_packed"] / ceiling, 3)
        for name, key in (("raw", "raw_pairs_per_s"), ("epoch", "overall_pairs_per_s")):
            ratio = rows["rm-shared"][key] / rows["rm-packed"][key]
            extra[f"fraction_of_ceiling_{name}"] = round(ratio / ceiling, 3)
        flops = rows["rm-packed"]["computed_flops_per_pair"] / rows["rm-shared"]["computed_flops_per_pair"]
        extra["flop_ceiling_shared_over_packed"] = round(flops, 3)
        extra["fraction_of_flop_ceiling"] = round(extra["shared_over_packed"] / flops, 3)
    if "trl-grouped" in rows and "rm-shared" in rows:
        extra["speedup_vs_trl_grouped"] = round(speed["rm-shared"] / speed["trl-grouped"], 3)
    return extra


def main() -> None:
    ap = benchlib.arguments(__doc__, "bench_train", budget=1536, slice_s=8.0)
    ap.set_defaults(modes=",".join(MODES))
    ap.add_argument("--n-eval", type=int, default=381, help="held-out pairs (2,312 - 381 = 1,931 left to train on)")
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
    bench = benchlib.bench_pairs(args.data, args.work, args.n_eval, 512, 8192, args.seed, args.limit)
    print(f"{len(bench.train)} train / {len(bench.eval)} held-out pairs ({bench.dropped} longer than 512 left out); "
          f"model: {args.size} {benchlib.MODEL}")  # fmt: skip
    for m in modes:
        (args.work / f"{m}.progress").unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--work", str(args.work), "--seed", str(args.seed), "--budget", str(args.budget)]
    cmd += ["--size", args.size]
    commands = {m: cmd + ["--worker", m] for m in modes}
    turns, peaks = benchlib.conduct(commands, args.work, args.slice, total_pairs=len(bench.train))
    # kept beside the progress files, so a run's figures can be recomputed (benchlib.rates) without rerunning it
    (args.work / "turns.json").write_text(json.dumps({"turns": turns, "peaks": peaks}))
    rows = report(args.work, modes, turns, peaks, bench.train)
    print(benchlib.summary_line(rows, extra_summary(rows)))


if __name__ == "__main__":
    main()
