"""Attention over shared-layout rows on the CPU: rm's one masked call against calls that skip masked blocks.

    python scripts/bench_attention.py                       # 40 batches of bench_groups.py's data, small model
    python scripts/bench_attention.py --size medium
    python scripts/bench_attention.py --batches 4 --turns 2 # a quick look

Why this exists: rm's shared layout (rm/collate/pack.py) hands SDPA one boolean mask per row
(rm/model/masks.py:dense_mask), and the CPU kernels compute every (query, key) block of a row under a mask.
A group's row `[prompt | r1 | r2 | r3 | r4]` is wider than a pair's `[prompt | chosen | rejected]`, so attention
costs a group's slot more than a pair's: the gap between the grouped benchmark's token ceiling and its FLOP ceiling
(scripts/bench_groups.py). Computing only the blocks a row needs would close that gap if it paid on this
hardware. Variants, forward and backward, on the same q, k, v (one attention layer of the `--size` model):
- dense: rm's call, one SDPA over the batch with rm's mask;
- math: the same call on SDPA's math backend (scores materialized);
- split: per group, the prompt causally (no mask) and each response against its prompt and itself, one call
  each: only the blocks needed, K + 1 calls a group;
- gathered: the same split as two batched calls (every prompt, every response padded), by index gathers.
FlexAttention skips masked blocks by design; whether the CPU has its backward is checked and printed.

Each batch is 2 groups of 4 from bench_groups.py's training data (`--ids`; the data is written by a run of that
script) taken as neighbours in length order, as its length grouping batches them, and the same groups' 12
pairs packed as rm packs pairs: the work of one optimizer step of either mode. Every variant's output
equals dense's on every real token (1e-5), checked before timing. Turns interleave the variants (A B C D A B
…); a variant's time is the median over turns of its time on all batches.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from itertools import combinations
from pathlib import Path

import benchlib  # puts the repository on sys.path
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from rm.collate.pack import PROMPT, pack
from rm.model.masks import dense_mask

GROUPS_PER_BATCH = 2


def segments(pair_ids: torch.Tensor, segment_ids: torch.Tensor) -> list[list[tuple[int, int, list[tuple[int, int]]]]]:
    """Per row, each group's prompt columns and its responses' columns: [(start, end, [(start, end), ...])]."""
    rows = []
    for pairs, segs in zip(pair_ids.tolist(), segment_ids.tolist(), strict=True):
        groups, col = [], 0
        while col < len(pairs) and pairs[col] >= 0:
            spans, g = [], pairs[col]
            while col < len(pairs) and pairs[col] == g:
                start, s = col, segs[col]
                while col < len(pairs) and pairs[col] == g and segs[col] == s:
                    col += 1
                spans.append((start, col))
            assert segs[spans[0][0]] == PROMPT
            groups.append((*spans[0], spans[1:]))
        rows.append(groups)
    return rows


def dense(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def math(q, k, v, mask):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def split(q, k, v, plan):
    """Only the needed blocks: the prompt's causal square, then each response over [prompt | itself]."""
    out = []
    for r, groups in enumerate(plan):
        qr, kr, vr = q[r : r + 1], k[r : r + 1], v[r : r + 1]
        parts = []
        for p0, p1, responses in groups:
            prompt = (x[:, :, p0:p1] for x in (qr, kr, vr))
            parts.append(F.scaled_dot_product_attention(*prompt, is_causal=True))
            for a, b in responses:
                n, m = b - a, p1 - p0
                keys = torch.cat([kr[:, :, p0:p1], kr[:, :, a:b]], 2)
                values = torch.cat([vr[:, :, p0:p1], vr[:, :, a:b]], 2)
                allowed = torch.ones(n, m + n, dtype=torch.bool).tril(m)  # every prompt key, then causal
                parts.append(F.scaled_dot_product_attention(qr[:, :, a:b], keys, values, attn_mask=allowed))
        used = sum(p.shape[2] for p in parts)
        parts.append(qr.new_zeros(1, q.shape[1], q.shape[2] - used, q.shape[3]))  # the row's padded tail
        out.append(torch.cat(parts, 2))
    return torch.cat(out, 0)


def gather_plan(plan, width: int) -> dict:
    """Flat indices (row * width + column) for `gathered`: prompts [G, Pmax], responses' queries [N, Rmax] and
    keys [N, Pmax + Rmax] with their masks, and where each token's output lands in the concatenated results."""
    prompts = [(r * width + p0, p1 - p0, [(r * width + a, b - a) for a, b in rs]) for r, gs in enumerate(plan)
               for p0, p1, rs in gs]  # fmt: skip
    p_max = max(n for _, n, _ in prompts)
    r_max = max(n for _, _, rs in prompts for _, n in rs)
    n_resp = sum(len(rs) for _, _, rs in prompts)
    zero = len(prompts) * p_max + n_resp * r_max  # index of an all-zero output row (padding)
    land = torch.full((len(plan) * width,), zero, dtype=torch.long)
    p_idx = torch.zeros(len(prompts), p_max, dtype=torch.long)
    q_idx = torch.zeros(n_resp, r_max, dtype=torch.long)
    k_idx = torch.zeros(n_resp, p_max + r_max, dtype=torch.long)
    masks = torch.zeros(n_resp, 1, r_max, p_max + r_max, dtype=torch.bool)
    masks[:, :, :, 0] = True  # a padded query sees one key (an empty row would give NaN)
    u = 0
    for g, (p, n_p, rs) in enumerate(prompts):
        p_idx[g, :n_p] = torch.arange(p, p + n_p)
        land[p : p + n_p] = torch.arange(g * p_max, g * p_max + n_p)
        for a, n in rs:
            q_idx[u, :n] = torch.arange(a, a + n)
            k_idx[u, :n_p] = torch.arange(p, p + n_p)
            k_idx[u, n_p : n_p + n] = torch.arange(a, a + n)
            masks[u, 0, :n, :n_p] = True
            masks[u, 0, :n, n_p : n_p + n] = torch.ones(n, n, dtype=torch.bool).tril()
            start = len(prompts) * p_max + u * r_max
            land[a : a + n] = torch.arange(start, start + n)
            u += 1
    return {"prompts": p_idx, "queries": q_idx, "keys": k_idx, "masks": masks, "land": land}


def gathered(q, k, v, plan):
    rows, heads, width, dim = q.shape
    flat = [x.transpose(1, 2).reshape(rows * width, heads, dim) for x in (q, k, v)]

    def take(x, idx):
        return x[idx.reshape(-1)].reshape(*idx.shape, heads, dim).transpose(1, 2)

    p = plan["prompts"]
    out_p = F.scaled_dot_product_attention(take(flat[0], p), take(flat[1], p), take(flat[2], p), is_causal=True)
    keys = plan["keys"]
    out_r = F.scaled_dot_product_attention(
        take(flat[0], plan["queries"]), take(flat[1], keys), take(flat[2], keys), attn_mask=plan["masks"]
    )
    done = torch.cat([out_p.transpose(1, 2).reshape(-1, heads, dim), out_r.transpose(1, 2).reshape(-1, heads, dim)])
    done = torch.cat([done, done.new_zeros(1, heads, dim)])
    return done[plan["land"]].reshape(rows, width, heads, dim).transpose(1, 2)


VARIANTS = {"dense": dense, "math": math, "split": split, "gathered": gathered}


def batches(ids: Path | None, n: int, seed: int) -> tuple[list[list[dict]], str]:
    """`n` batches of 2 groups (prompt ids and 4 responses' ids), neighbours in length order."""
    rng = random.Random(seed)
    if ids is not None and ids.exists():
        groups, source = json.loads(ids.read_text())["groups"], str(ids)
    else:  # lengths of bench_groups.py's data's order (prompt ~110 tokens, responses ~45), seeded
        groups = [{"prompt": [1] * rng.randint(30, 190), "responses": [[1] * rng.randint(5, 85) for _ in range(4)]}
                  for _ in range(400)]  # fmt: skip
        source = "seeded lengths (no --ids file)"
    groups.sort(key=lambda g: len(g["prompt"]) + sum(map(len, g["responses"])))
    starts = [rng.randrange(len(groups) - GROUPS_PER_BATCH + 1) for _ in range(n)]
    return [groups[s : s + GROUPS_PER_BATCH] for s in starts], source


def layouts(batch: list[dict]) -> dict[str, dict]:
    """The batch packed as rm packs it: {"groups": tensors, "pairs": tensors of the groups' ordered pairs}."""
    grouped = [(g["prompt"], g["responses"]) for g in batch]
    pairs = [(p, [rs[a], rs[b]]) for p, rs in grouped for a, b in combinations(range(len(rs)), 2)]
    return {"groups": pack(grouped, 0)[0], "pairs": pack(pairs, 0)[0]}


def flex_backward_on_cpu() -> str:
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 1, 16, 16, requires_grad=True)
    try:
        flex_attention(q, q, q).sum().backward()
    except Exception as e:  # noqa: BLE001 - any refusal is the answer
        return f"no ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    return "yes"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", type=Path, default=benchlib.REPO / "runs" / "bench_groups" / "ids.json")
    ap.add_argument("--size", choices=sorted(benchlib.SIZES), default="small")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    model = benchlib.SIZES[args.size]
    heads = model["num_attention_heads"]
    dim = model["hidden_size"] // heads
    picked, source = batches(args.ids, args.batches, args.seed)
    work = []  # (layout, q, k, v, inputs per variant, real-token mask, slots)
    for batch in picked:
        for name, t in layouts(batch).items():
            rows, width = t["pair_ids"].shape
            q, k, v = (torch.randn(rows, heads, width, dim, requires_grad=True) for _ in range(3))
            plan = segments(t["pair_ids"], t["segment_ids"])
            mask = dense_mask(t["pair_ids"], t["segment_ids"])
            inputs = {"dense": mask, "math": mask, "split": plan, "gathered": gather_plan(plan, width)}
            work.append((name, q, k, v, inputs, t["pair_ids"] >= 0, rows * width))
    for name, q, k, v, inputs, real, _ in work:
        ref = dense(q, k, v, inputs["dense"])
        for variant, fn in VARIANTS.items():
            got = fn(q, k, v, inputs[variant])
            err = (got - ref).transpose(1, 2)[real].abs().max().item()
            if err > 1e-5:
                raise SystemExit(f"{variant} differs from dense by {err:.2e} on a {name} batch")
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.turns):
        for variant, fn in VARIANTS.items():
            for layout in ("groups", "pairs"):
                start = time.perf_counter()
                for name, q, k, v, inputs, _, _ in work:
                    if name == layout:
                        fn(q, k, v, inputs[variant]).sum().backward()
                times.setdefault((layout, variant), []).append(time.perf_counter() - start)
    slots = {lay: sum(w[6] for w in work if w[0] == lay) for lay in ("groups", "pairs")}
    ceiling = slots["pairs"] / slots["groups"]
    print(f"{len(picked)} batches of {GROUPS_PER_BATCH} groups of 4 ({source}); {args.size}: {heads} heads of {dim}; "
          f"slots: groups {slots['groups']}, pairs {slots['pairs']} (token ceiling {ceiling:.2f}x)")  # fmt: skip
    print(f"{'layout':<7} {'variant':<9} {'ms/batch':>9} {'x dense':>8} {'us/slot':>8}")
    summary = {}
    for layout in ("groups", "pairs"):
        base = statistics.median(times[(layout, "dense")])
        for variant in VARIANTS:
            t = statistics.median(times[(layout, variant)])
            summary[f"{layout}_{variant}_ms"] = round(1e3 * t / len(picked), 3)
            per_slot = 1e6 * t / slots[layout]
            print(f"{layout:<7} {variant:<9} {1e3 * t / len(picked):9.2f} {t / base:8.2f} {per_slot:8.2f}")
    print(f"FlexAttention backward on the CPU: {flex_backward_on_cpu()}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
