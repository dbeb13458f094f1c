"""Training throughput: rm's shared layout, rm's padded layout and TRL's RewardTrainer, interleaved.

    python scripts/bench_train.py                       # one epoch of ~1,850 real HH pairs per mode
    python scripts/bench_train.py --limit 200 --slice 10   # a quick smoke run

All modes train the same random-init Llama (hidden 256, 4 layers, 4 heads; vocab from a BPE trained
on the data) on the same token ids of the same real harmless-base pairs for one epoch, lr 1e-4,
linear decay, no warm-up, fp32, gradient checkpointing off (TRL's default turns it on, which is
slower on this machine). TRL and rm padded take 8 pairs per step; rm shared takes a token budget
that holds 8 pairs on average, length-grouped. See benchlib.py for how the modes are interleaved.
Needs the `bench` extra (TRL): pip install -e '.[bench]'.
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


def rm_worker(mode: str, work: Path, seed: int, budget: int) -> None:
    from rm.config import load_config
    from rm.training.run import main

    progress = benchlib.Progress(work / f"{mode}.progress")
    layout = mode.removeprefix("rm-")
    m = benchlib.MODEL
    overrides = [
        f"output_dir={work / mode}",
        "train.overwrite=true",  # a rerun of the benchmark in the same --work folder
        f"data.source={work / 'hh'}",
        f"tokenizer.name_or_path={work / 'tokenizer'}",
        f"model.random_init.hidden_size={m['hidden_size']}",
        f"model.random_init.num_hidden_layers={m['num_hidden_layers']}",
        f"model.random_init.num_attention_heads={m['num_attention_heads']}",
        f"model.random_init.intermediate_size={m['intermediate_size']}",
        "model.random_init.max_position_embeddings=1024",
        "collator.max_length=512",
        f"collator.layout={layout}",
        f"collator.max_tokens={budget if layout == 'shared' else 0}",
        f"collator.eval_max_tokens={4 * budget if layout == 'shared' else 0}",
        f"train.batch_size={BATCH}",
        "train.eval_batch_size=32",
        "train.epochs=1",
        f"train.lr={LR}",
        "train.scheduler=linear",
        "train.warmup_ratio=0",
        "train.report_to=[]",
        "train.log_steps=1000000",
        f"train.seed={seed}",
        "export.enabled=false",
    ]
    started = False

    def on_batch(batch: dict, loss: torch.Tensor) -> None:
        nonlocal started
        if not started:  # the first step pays for allocation and warm-up: not timed
            started = True
            benchlib.pause_until_conducted()
            return
        real = (batch["pair_ids"] >= 0).sum() if "pair_ids" in batch else batch["attention_mask"].sum()
        progress.step(len(batch["subset_ids"]), int(real), batch["input_ids"].numel(), loss.item())

    result = main(load_config(None, overrides), on_batch=on_batch)
    progress.finish(accuracy=result["overall"]["accuracy"], n_eval=result["overall"]["n"])


def trl_worker(work: Path, seed: int) -> None:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    from rm.collate.padded import PaddedCollator
    from rm.collate.planner import PairBatches
    from rm.data.encode import EncodedPair
    from rm.evaluation.summary import summarize
    from rm.model.reward import RewardModel, pair_rewards

    progress = benchlib.Progress(work / "trl.progress")
    tok = AutoTokenizer.from_pretrained(work / "tokenizer")
    ids = benchlib.load_ids(work)
    train = Dataset.from_dict(
        {
            "chosen_ids": [p["prompt"] + p["chosen"] for p in ids["train"]],
            "rejected_ids": [p["prompt"] + p["rejected"] for p in ids["train"]],
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
    )
    counts = {"pairs": 0, "tokens": 0, "slots": 0, "loss": 0.0, "steps": 0}

    class Counting(RewardTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            counts["pairs"] += inputs["input_ids"].shape[0] // 2
            counts["tokens"] += int(inputs["attention_mask"].sum())
            counts["slots"] += inputs["input_ids"].numel()
            counts["loss"] = (out[0] if return_outputs else out).item()
            return out

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            counts["steps"] += 1
            if counts["steps"] == 1:  # as for rm: the first step is not timed
                benchlib.pause_until_conducted()
            else:
                progress.step(counts["pairs"], counts["tokens"], counts["slots"], counts["loss"])
            counts.update(pairs=0, tokens=0, slots=0)

    trainer = Counting(model=model, args=args, train_dataset=train, processing_class=tok, callbacks=[Clock()])
    trainer.train()
    # Held-out accuracy measured the same way for every mode: rm's padded scoring of the same ids.
    held = [EncodedPair(p["prompt"], p["chosen"], p["rejected"], 0, index=i) for i, p in enumerate(ids["eval"])]
    scorer = RewardModel(trainer.model).eval()
    collate = PaddedCollator(tok.pad_token_id)
    chosen, rejected = [], []
    with torch.no_grad():
        for b in PairBatches(held, "padded", 32, shuffle=False):
            c, r = pair_rewards(scorer, collate([held[i] for i in b]))
            chosen.append(c)
            rejected.append(r)
    summary = summarize(torch.cat(chosen), torch.cat(rejected))
    progress.finish(accuracy=summary["accuracy"], n_eval=summary["n"])


def report(work: Path, modes: list[str], turns: dict, peaks: list[float], prep_pairs: list[dict]) -> dict:
    from transformers import AutoConfig

    n_params = benchlib.non_embedding_params()
    cfg = AutoConfig.for_model("llama", **benchlib.MODEL)
    flops_per_pair = benchlib.useful_flops(prep_pairs, n_params, cfg.num_hidden_layers, cfg.hidden_size, True)
    flops_per_pair /= len(prep_pairs)
    peak = statistics.median(peaks) * 1e9
    rows = {m: benchlib.rates(work / f"{m}.progress", turns[m]) for m in modes}
    head = f"{'mode':<10} {'pairs/s':>8} {'real tok/s':>10} {'slots/s':>9} {'peak RSS':>9} {'final loss':>10}"
    head += f" {'held-out acc':>12} {'MFU':>6} {'turns':>5}"
    print(head)
    print("-" * len(head))
    for m, r in rows.items():
        losses = r["losses"]
        tail = statistics.mean(losses[-max(1, len(losses) // 10) :]) if losses else float("nan")
        r["final_loss"] = tail
        r["mfu"] = r["pairs_per_s"] * flops_per_pair / peak
        print(
            f"{m:<10} {r['pairs_per_s']:8.2f} {r['tokens_per_s']:10.0f} {r['slots_per_s']:9.0f} "
            f"{r['peak_rss_mb']:7.0f}MB {tail:10.4f} {r['accuracy']:12.4f} {r['mfu']:6.1%} {r['turns']:5d}"
        )
    print(f"\nmatmul peak (fp32, 1024^2, median of {len(peaks)}): {statistics.median(peaks):.1f} GFLOP/s "
          f"(min {min(peaks):.1f}, max {max(peaks):.1f}); useful FLOPs per pair {flops_per_pair / 1e9:.2f} GFLOP "
          "(prompt counted once, forward + backward)")  # fmt: skip
    quarters = {}
    for m, r in rows.items():
        losses = r["losses"]
        q = max(1, len(losses) // 4)
        quarters[m] = [round(statistics.mean(losses[i : i + q]), 4) for i in range(0, q * 4, q) if losses[i : i + q]]
    print("mean loss per quarter of the epoch:", json.dumps(quarters))
    return rows


def main() -> None:
    ap = benchlib.arguments(__doc__, "bench_train", budget=1536, slice_s=20.0)
    ap.add_argument("--n-eval", type=int, default=381, help="held-out pairs (2,312 - 381 = 1,931 as in issue 3)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    if args.worker:
        if args.worker == "trl":
            trl_worker(args.work, args.seed)
        else:
            rm_worker(args.worker, args.work, args.seed, args.budget)
        return
    modes = args.modes.split(",")
    prep = benchlib.prepare(args.data, args.work, args.n_eval, 512, 8192, args.seed, args.limit)
    print(f"{len(prep.train)} train / {len(prep.eval)} held-out pairs ({prep.dropped} longer than 512 left out)")
    for m in modes:
        (args.work / f"{m}.progress").unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--work", str(args.work), "--seed", str(args.seed), "--budget", str(args.budget)]
    turns, peaks = benchlib.conduct({m: cmd + ["--worker", m] for m in modes}, args.work, args.slice)
    rows = report(args.work, modes, turns, peaks, prep.train)
    print(benchlib.summary_line(rows))


if __name__ == "__main__":
    main()
