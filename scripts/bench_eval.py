"""Scoring throughput (no gradients) at equal pairs per batch: TRL's evaluate and rm's layouts, interleaved.

    python scripts/bench_eval.py                 # two passes over ~2,250 real HH pairs per mode
    python scripts/bench_eval.py --passes 1 --limit 300 --slice 5   # a quick smoke run

Same model, tokenizer and token ids as scripts/bench_train.py (see there and benchlib.py). Every mode
scores 8 pairs per batch: TRL runs `RewardTrainer.evaluate`; rm padded, rm packed (prompt duplicated)
and rm shared score through the function training's eval uses, the packed layouts packing the 8 pairs
of a batch into rows (length-grouped, as rm's eval does with a token budget).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import benchlib
import torch

BATCH = 8


def all_pairs(work: Path, limit: int) -> list[dict]:
    ids = benchlib.load_ids(work)
    pairs = ids["train"] + ids["eval"]
    return pairs[:limit] if limit else pairs


def rm_worker(mode: str, work: Path, seed: int, budget: int, passes: int, limit: int) -> None:
    from transformers import AutoTokenizer

    from rm.collate.pack import PackedCollator, SharedCollator
    from rm.collate.padded import PaddedCollator
    from rm.collate.planner import PairBatches
    from rm.model.reward import RewardModel, pair_rewards
    from rm.tokens.store import EncodedGroup

    progress = benchlib.Progress(work / f"{mode}.progress")
    tok = AutoTokenizer.from_pretrained(work / "tokenizer")
    pairs = [
        EncodedGroup.pair(p["prompt"], p["chosen"], p["rejected"], 0, index=i)
        for i, p in enumerate(all_pairs(work, limit))
    ]
    layout = mode.removeprefix("rm-")
    model = RewardModel(benchlib.random_model(len(tok), tok.pad_token_id, tok.eos_token_id, seed)).eval()
    collate = {"shared": SharedCollator, "packed": PackedCollator, "padded": PaddedCollator}[layout](tok.pad_token_id)
    # 8 pairs a batch in every mode; the packed layouts group pairs by length (padding costs them nothing else)
    batches = PairBatches(pairs, layout, BATCH, shuffle=False, group_by_length=layout != "padded")
    checksum = 0.0
    with torch.no_grad():
        for i, b in enumerate(b for _ in range(passes) for b in batches):
            batch = collate([pairs[j] for j in b])
            chosen, rejected = pair_rewards(model, batch)
            checksum += float((chosen - rejected).sum())
            if i == 0:
                benchlib.pause_until_conducted()  # the first batch warms up: not timed
                continue
            real = (batch["pair_ids"] >= 0).sum() if "pair_ids" in batch else batch["attention_mask"].sum()
            progress.step(len(b), int(real), batch["input_ids"].numel())
    progress.finish(checksum=checksum)


def trl_worker(work: Path, seed: int, passes: int, limit: int) -> None:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    progress = benchlib.Progress(work / "trl.progress")
    tok = AutoTokenizer.from_pretrained(work / "tokenizer")
    pairs = all_pairs(work, limit)
    data = Dataset.from_dict(
        {
            "chosen_ids": [p["prompt"] + p["chosen"] for p in pairs],
            "rejected_ids": [p["prompt"] + p["rejected"] for p in pairs],
        }
    )
    model = benchlib.random_model(len(tok), tok.pad_token_id, tok.eos_token_id, seed)
    args = RewardConfig(
        output_dir=str(work / "trl"),
        per_device_eval_batch_size=BATCH,
        bf16=False,
        fp16=False,
        use_cpu=True,
        max_length=512,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    counts = {"pairs": 0, "tokens": 0, "slots": 0, "batches": 0}

    class Counting(RewardTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            counts["pairs"] += inputs["input_ids"].shape[0] // 2
            counts["tokens"] += int(inputs["attention_mask"].sum())
            counts["slots"] += inputs["input_ids"].numel()
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    class Clock(TrainerCallback):
        def on_prediction_step(self, args, state, control, **kwargs):
            counts["batches"] += 1
            if counts["batches"] == 1:
                benchlib.pause_until_conducted()
            else:
                progress.step(counts["pairs"], counts["tokens"], counts["slots"])
            counts.update(pairs=0, tokens=0, slots=0)

    trainer = Counting(
        model=model, args=args, train_dataset=data, eval_dataset=data, processing_class=tok, callbacks=[Clock()]
    )
    for _ in range(passes):
        metrics = trainer.evaluate()
    progress.finish(trl_accuracy=metrics.get("eval_accuracy"))


def main() -> None:
    ap = benchlib.arguments(__doc__, "bench_eval", budget=4096, slice_s=15.0)
    ap.set_defaults(modes="trl,rm-padded,rm-packed,rm-shared")
    ap.add_argument("--passes", type=int, default=2, help="passes over the pairs per mode")
    args = ap.parse_args()
    torch.set_num_threads(2)
    if args.worker:
        if args.worker == "trl":
            trl_worker(args.work, args.seed, args.passes, args.limit)
        else:
            rm_worker(args.worker, args.work, args.seed, args.budget, args.passes, args.limit)
        return
    modes = args.modes.split(",")
    bench = benchlib.bench_pairs(args.data, args.work, 381, 512, 8192, args.seed, 0)
    n = len(all_pairs(args.work, args.limit))
    print(f"scoring {n} pairs x {args.passes} passes per mode ({bench.dropped} longer than 512 left out)")
    for m in modes:
        (args.work / f"{m}.progress").unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--work", str(args.work), "--seed", str(args.seed), "--budget", str(args.budget)]
    cmd += ["--passes", str(args.passes), "--limit", str(args.limit)]
    commands = {m: cmd + ["--worker", m] for m in modes}
    turns, peaks = benchlib.conduct(commands, args.work, args.slice, total_pairs=n * args.passes)

    n_params = benchlib.non_embedding_params()
    m = benchlib.MODEL
    pairs = all_pairs(args.work, args.limit)
    per_pair = benchlib.useful_flops(pairs, n_params, m["num_hidden_layers"], m["hidden_size"], False) / len(pairs)
    peak = statistics.median(peaks) * 1e9
    head = f"{'mode':<10} {'pairs/s':>8} {'real tok/s':>10} {'slots/s':>9} {'peak RSS':>9} {'MFU':>6} {'turns':>5}"
    print(head + "\n" + "-" * len(head))
    rows = {}
    for mode in modes:
        r = benchlib.rates(args.work / f"{mode}.progress", turns[mode])
        r["mfu"] = r["pairs_per_s"] * per_pair / peak
        rows[mode] = r
        print(
            f"{mode:<10} {r['pairs_per_s']:8.2f} {r['tokens_per_s']:10.0f} {r['slots_per_s']:9.0f} "
            f"{r['peak_rss_mb']:7.0f}MB {r['mfu']:6.1%} {r['turns']:5d}"
        )
    for layout in ("rm-shared", "rm-packed"):
        if layout in rows and "rm-padded" in rows:
            same = abs(rows[layout]["checksum"] - rows["rm-padded"]["checksum"])
            print(f"sum of reward gaps, {layout} vs rm-padded: differ by {same:.2e} (same model, same pairs)")
    print(f"matmul peak (fp32, 1024^2, median of {len(peaks)}): {statistics.median(peaks):.1f} GFLOP/s; "
          f"useful FLOPs per pair {per_pair / 1e9:.2f} GFLOP (forward, prompt counted once)")  # fmt: skip
    extra = {"pairs_per_batch": BATCH}
    if "rm-packed" in rows:
        extra["packed_pairs_per_s"] = round(rows["rm-packed"]["pairs_per_s"], 3)
    print(benchlib.summary_line(rows, extra))


if __name__ == "__main__":
    main()
