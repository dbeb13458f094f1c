"""rm's layouts at equal pairs per micro-batch on a CUDA GPU: training throughput of a random-init ~0.5B Llama in bf16.

    python scripts/bench_layout.py [--attn sdpa flex_attention] [--batch 16] [--budget 240] [--json OUT]

Run by scripts/gpu_check.sh. The pairs have HH-RLHF-like token lengths, drawn from a fixed seed: prompts
lognormal around 150 tokens (8..1500), each response around 50 (2..400), so the prompt is about 60-70%
of a sequence as in HH. Every mode gets the same pairs, `--batch` pairs per micro-batch (planned by rm's
own PairBatches), and runs forward + backward of the Bradley-Terry loss; the optimizer step is left out
(it costs the same in every mode). The modes are those of scripts/bench_train.py without TRL: padded
(random batches), padded-grouped (length-grouped), packed (padding-free, prompt duplicated) and shared
(prompt once), the last three length-grouped.

Per attention kernel and mode the table gives pairs/s, token slots per pair (padding included), peak
memory, the speed-up over padded, and the ceiling of sharing over packing (packed slots / shared
slots). Before timing, every layout scores the same 16 pairs and the largest reward difference from
padded is reported (bf16, so about 1e-2, not 0). A total time budget keeps the script bounded:
configurations it cannot reach are listed as skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rm.collate.pack import PackedCollator, SharedCollator, group_length  # noqa: E402
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches  # noqa: E402
from rm.config import ModelConfig, RandomInitConfig  # noqa: E402
from rm.model.build import build_model
from rm.model.group_loss import bradley_terry_loss  # noqa: E402
from rm.model.reward import RewardModel, pair_rewards  # noqa: E402
from rm.tokens.store import EncodedGroup  # noqa: E402

VOCAB, PAD, EOS = 32000, 0, 1
# ~0.5B parameters: 28 blocks of width 1024 (16.8M each) + 32.8M embeddings.
SHAPE = RandomInitConfig(
    model_type="llama",
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    intermediate_size=4096,
    max_position_embeddings=4096,
)


def hh_like_pairs(n: int, seed: int) -> list[EncodedGroup]:
    rng = random.Random(seed)

    def length(median: float, lo: int, hi: int) -> int:
        return min(hi, max(lo, round(rng.lognormvariate(math.log(median), 0.8))))

    def ids(k: int) -> list[int]:
        return [rng.randrange(2, VOCAB) for _ in range(k)]

    return [
        EncodedGroup.pair(ids(length(150, 8, 1500)), ids(length(50, 2, 400)), ids(length(50, 2, 400)), 0, index=i)
        for i in range(n)
    ]


def build(attn: str, shape: RandomInitConfig, device: str) -> RewardModel:
    torch.manual_seed(0)
    cfg = ModelConfig(random_init=shape, dtype="bfloat16", attn_implementation=attn)
    return RewardModel(build_model(cfg, VOCAB, PAD, EOS)).to(device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


MODES = {"padded": ("padded", False), "padded-grouped": ("padded", True), "packed": ("packed", True)}
MODES["shared"] = ("shared", True)  # mode -> (layout, length-grouped batches)


def collator(layout: str):
    return {"shared": SharedCollator, "packed": PackedCollator, "padded": PaddedCollator}[layout](PAD)


@torch.no_grad()
def agreement(model: RewardModel, pairs: list[EncodedGroup], device: str) -> float:
    """Largest reward difference of the packed and shared layouts from padded on the same pairs."""
    model.eval()
    got = []
    for layout in ("padded", "packed", "shared"):
        batch = {k: v.to(device) for k, v in collator(layout)(pairs).items()}
        got.append(torch.cat(pair_rewards(model, batch)))
    model.train()
    return max((got[0] - g).abs().max().item() for g in got[1:])


def measure(model: RewardModel, pairs, mode: str, per_batch: int, warmup: int, seconds: float, device: str):
    layout, grouped = MODES[mode]
    plan = PairBatches(pairs, layout, per_batch, 0, True, 0, group_by_length=grouped)
    collate = collator(layout)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    def batches():
        epoch = 0
        while True:
            plan.set_epoch(epoch)
            for idx in plan:
                yield [pairs[i] for i in idx]
            epoch += 1

    n_pairs = slots = steps = 0
    start = None
    for i, group in enumerate(batches()):
        if i == warmup:
            sync(device)
            start = time.perf_counter()
        batch = {k: v.to(device, non_blocking=True) for k, v in collate(group).items()}
        chosen, rejected = pair_rewards(model, batch)
        bradley_terry_loss(chosen, rejected).backward()
        for p in params:
            p.grad = None
        if start is not None:
            n_pairs += len(group)
            slots += batch["input_ids"].numel()
            steps += 1
            if steps % 4 == 0:
                sync(device)
                if time.perf_counter() - start >= seconds:
                    break
    sync(device)
    elapsed = time.perf_counter() - start
    return {
        "pairs_per_s": n_pairs / elapsed,
        "slots_per_pair": slots / n_pairs,
        "peak_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan"),
        "steps": steps,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attn", nargs="+", default=["sdpa", "flex_attention"])
    parser.add_argument("--pairs", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16, help="pairs per micro-batch, in every mode")
    parser.add_argument("--warmup", type=int, default=3, help="micro-batches before timing (compilation)")
    parser.add_argument("--seconds", type=float, default=12.0, help="timed seconds per configuration")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for the whole script")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--smoke", action="store_true", help="a 2-block model on any device: checks the script")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        print("bench_layout: no CUDA device; nothing to measure (--smoke checks the script on the CPU)")
        return 2
    shape = SHAPE
    if args.smoke:
        shape = RandomInitConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
        shape.max_position_embeddings = 4096
    began = time.perf_counter()
    pairs = hh_like_pairs(args.pairs, seed=0)
    tokens = sum(group_length(p) for p in pairs) / len(pairs)
    prompt = sum(2 * len(p.prompt_ids) for p in pairs) / sum(group_length(p) + len(p.prompt_ids) for p in pairs)
    rows, n_params = [], 0
    for attn in args.attn:
        if time.perf_counter() - began > args.budget:
            rows += [{"attn": attn, "layout": mode, "skipped": "time budget"} for mode in MODES]
            continue
        model = build(attn, shape, device)
        n_params = sum(p.numel() for p in model.parameters())
        diff = agreement(model, pairs[:16], device)
        for mode in MODES:
            if time.perf_counter() - began > args.budget:
                rows.append({"attn": attn, "layout": mode, "skipped": "time budget"})
                continue
            r = measure(model, pairs, mode, args.batch, args.warmup, args.seconds, device)
            rows.append({"attn": attn, "layout": mode, "reward_diff": diff, **r})
            print(f"{attn:>15} {mode:>14}: {r}", flush=True)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()

    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "params": n_params, "args": vars(args) | {"json": None}}))
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)"
    print(
        f"\nrm's layouts, random-init Llama {n_params / 1e9:.2f}B bf16 on {name}; {len(pairs)} HH-like pairs "
        f"({tokens:.0f} tokens a pair, prompt {100 * prompt:.0f}% of the two sequences); "
        f"{args.batch} pairs a micro-batch in every mode; forward + backward"
    )
    print(
        f"{'attention':<15} {'mode':<15} {'pairs/s':>9} {'slots/pair':>11} {'peak GiB':>9} {'vs padded':>9} {'|Δr|':>8}"
    )
    for r in rows:
        if "skipped" in r:
            print(f"{r['attn']:<15} {r['layout']:<15} skipped ({r['skipped']})")
            continue
        base = next((b for b in rows if b["attn"] == r["attn"] and b["layout"] == "padded" and "skipped" not in b), r)
        print(
            f"{r['attn']:<15} {r['layout']:<15} {r['pairs_per_s']:9.1f} {r['slots_per_pair']:11.0f} "
            f"{r['peak_gb']:9.1f} {r['pairs_per_s'] / base['pairs_per_s']:8.2f}x {r['reward_diff']:8.1e}"
        )
    for attn in args.attn:
        done = {r["layout"]: r for r in rows if r["attn"] == attn and "skipped" not in r}
        if "packed" in done and "shared" in done:
            ceiling = done["packed"]["slots_per_pair"] / done["shared"]["slots_per_pair"]
            speedup = done["shared"]["pairs_per_s"] / done["packed"]["pairs_per_s"]
            print(f"{attn}: sharing over packing, token-count ceiling {ceiling:.2f}x, measured {speedup:.2f}x "
                  f"({speedup / ceiling:.0%} of it)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
