"""Shared-prefix vs padded layout on a CUDA GPU: training throughput of a random-init ~0.5B Llama in bf16.

    python scripts/bench_layout.py [--attn sdpa flex_attention] [--max-tokens 16384] [--budget 200] [--json OUT]

Run by scripts/gpu_check.sh. The pairs have HH-RLHF-like token lengths, drawn from a fixed seed: prompts
lognormal around 150 tokens (8..1500), each response around 50 (2..400), so the prompt is about 60-70%
of a sequence as in HH. Both layouts get the same pairs and the same token budget per micro-batch
(`collator.max_tokens`, padding included), planned by rm's own PairBatches, and run forward + backward
of the Bradley-Terry loss; the optimizer step is left out (it costs the same in both layouts).

Per attention kernel and layout the table gives pairs/s, token slots per pair (padding included),
peak memory and the speed-up of shared over padded. Before timing, both layouts score the same 16
pairs and the largest reward difference is reported (bf16, so about 1e-2, not 0). A total time
budget keeps the script bounded: configurations it cannot reach are listed as skipped.
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

from rm.collate.pack import SharedCollator, pair_length  # noqa: E402
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches  # noqa: E402
from rm.config import ModelConfig, RandomInitConfig  # noqa: E402
from rm.data.encode import EncodedPair  # noqa: E402
from rm.model.build import build_model
from rm.model.loss import bradley_terry_loss  # noqa: E402
from rm.model.reward import RewardModel, pair_rewards  # noqa: E402

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


def hh_like_pairs(n: int, seed: int) -> list[EncodedPair]:
    rng = random.Random(seed)

    def length(median: float, lo: int, hi: int) -> int:
        return min(hi, max(lo, round(rng.lognormvariate(math.log(median), 0.8))))

    def ids(k: int) -> list[int]:
        return [rng.randrange(2, VOCAB) for _ in range(k)]

    return [
        EncodedPair(ids(length(150, 8, 1500)), ids(length(50, 2, 400)), ids(length(50, 2, 400)), 0, index=i)
        for i in range(n)
    ]


def build(attn: str, shape: RandomInitConfig, device: str) -> RewardModel:
    torch.manual_seed(0)
    cfg = ModelConfig(random_init=shape, dtype="bfloat16", attn_implementation=attn)
    return RewardModel(build_model(cfg, VOCAB, PAD, EOS)).to(device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def collator(layout: str):
    return SharedCollator(PAD) if layout == "shared" else PaddedCollator(PAD)


@torch.no_grad()
def agreement(model: RewardModel, pairs: list[EncodedPair], device: str) -> float:
    model.eval()
    got = []
    for layout in ("padded", "shared"):
        batch = {k: v.to(device) for k, v in collator(layout)(pairs).items()}
        got.append(torch.cat(pair_rewards(model, batch)))
    model.train()
    return (got[0] - got[1]).abs().max().item()


def measure(model: RewardModel, pairs, layout: str, max_tokens: int, warmup: int, seconds: float, device: str):
    plan = PairBatches(pairs, layout, 1, max_tokens, True, 0)
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
    parser.add_argument("--max-tokens", type=int, default=16384, help="token slots per micro-batch")
    parser.add_argument("--warmup", type=int, default=3, help="micro-batches before timing (compilation)")
    parser.add_argument("--seconds", type=float, default=12.0, help="timed seconds per configuration")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds for the whole script")
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
    tokens = sum(pair_length(p) for p in pairs) / len(pairs)
    prompt = sum(2 * len(p.prompt_ids) for p in pairs) / sum(pair_length(p) + len(p.prompt_ids) for p in pairs)
    rows, n_params = [], 0
    for attn in args.attn:
        if time.perf_counter() - began > args.budget:
            rows += [{"attn": attn, "layout": lay, "skipped": "time budget"} for lay in ("padded", "shared")]
            continue
        model = build(attn, shape, device)
        n_params = sum(p.numel() for p in model.parameters())
        diff = agreement(model, pairs[:16], device)
        for layout in ("padded", "shared"):
            if time.perf_counter() - began > args.budget:
                rows.append({"attn": attn, "layout": layout, "skipped": "time budget"})
                continue
            r = measure(model, pairs, layout, args.max_tokens, args.warmup, args.seconds, device)
            rows.append({"attn": attn, "layout": layout, "reward_diff": diff, **r})
            print(f"{attn:>15} {layout:>6}: {r}", flush=True)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()

    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "params": n_params, "args": vars(args) | {"json": None}}))
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)"
    print(
        f"\nshared vs padded, random-init Llama {n_params / 1e9:.2f}B bf16 on {name}; {len(pairs)} HH-like pairs "
        f"({tokens:.0f} tokens a pair, prompt {100 * prompt:.0f}% of the two sequences); "
        f"{args.max_tokens} token slots a micro-batch; forward + backward"
    )
    print(
        f"{'attention':<15} {'layout':<7} {'pairs/s':>9} {'slots/pair':>11} {'peak GiB':>9} {'speed-up':>9} {'|Δr|':>8}"
    )
    for r in rows:
        if "skipped" in r:
            print(f"{r['attn']:<15} {r['layout']:<7} skipped ({r['skipped']})")
            continue
        base = next((b for b in rows if b["attn"] == r["attn"] and b["layout"] == "padded" and "skipped" not in b), r)
        print(
            f"{r['attn']:<15} {r['layout']:<7} {r['pairs_per_s']:9.1f} {r['slots_per_pair']:11.0f} "
            f"{r['peak_gb']:9.1f} {r['pairs_per_s'] / base['pairs_per_s']:8.2f}x {r['reward_diff']:8.1e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
