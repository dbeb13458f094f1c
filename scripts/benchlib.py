"""What the training and scoring benchmarks share: the data, the model, and the interleaved clock.

The machine these run on is shared and its matmul rate drifts by up to 2x within a minute, so
modes are never timed one after the other. Every mode runs in its own process (peak memory is then
its own), each process stops itself once set up, and the conductor runs them in turns of `--slice`
seconds with SIGCONT/SIGSTOP, in an order that rotates every round (A B C, B C A, C A B …) so no
mode always follows the same one. Given the pairs every mode has to do, a mode that is further
through its work than the one furthest behind skips the round (`due`), so every mode runs in every
phase of the run and all finish together: with a turn every round, the fastest mode finished in the
first few rounds and was measured only while every other worker was alive, when every mode ran 2-3%
slower than in later rounds on this machine. Turns keep one length, so a resumed process's cold
start weighs the same in every mode. Each process logs a timestamp after every step; a
mode's throughput in a turn is the work it finished during that turn over its running time, and the
table quotes the median over turns. Between rounds the conductor measures the machine's fp32 matmul
rate, the peak that model FLOPs utilisation is quoted against.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "scripts"))

from get_hh_data import hh_data_root  # noqa: E402

DEFAULT_DATA = hh_data_root() / "harmless-base" / "test.jsonl.gz"  # $RM_HH_DATA, make data, or ../shared
# The benchmark model: Llama, hidden 256, 4 layers, 4 heads, vocab from a BPE trained on the data.
MODEL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 688}
# Random Llamas of two widths: ~5M and ~30M parameters with an 8k vocabulary (`--size`).
SIZES = {
    "small": dict(MODEL),
    "medium": {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "intermediate_size": 1376},
}


def set_size(name: str) -> None:
    """Make every later `random_model` and worker config use the model size `name` (in place)."""
    MODEL.clear()
    MODEL.update(SIZES[name])


@dataclass
class Prepared:
    """The benchmark's tokenizer and its texts as token ids, fitted as training fits them."""

    tokenizer: PreTrainedTokenizerBase
    tokenizer_dir: Path
    fitted: dict[str, list[dict | None]]
    """Per set given to `prepare`, per item in its order: {"prompt": ids (the tokenizer's prefix included),
    "responses": [ids, ...]}, or None where rm's fitting rule would change the item at max_length."""


def load_examples(path: Path) -> list:
    """One benchmark file read by rm's own loader (its format detected as `rm train` detects it); a record rm
    refuses is skipped and counted there, as 4 real harmless-base pairs with an empty chosen answer are."""
    from rm.config import DataConfig
    from rm.data.load import load_pairs

    return load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"))


def prepare(bpe_on: list, sets: dict[str, list], work: Path, vocab: int, max_length: int) -> Prepared:
    """The BPE and the token ids every benchmark mode uses, made on the library's own path.

    The BPE is trained on the texts of `bpe_on` (pairs or groups, all of them) as `rm train` trains a random-init
    model's (rm/tokens/prepare.py), into `work/tokenizer`. Each set of `sets` is encoded as training encodes a split
    (rm/tokens/encode.py, which fits each group by rm/tokens/truncation.py's rule). An item is kept only where that
    rule leaves it whole (its prefix, prompt and longest response within `max_length`): where rm would cut a
    prompt, or drop a response or the group, TRL drops the pair, so every mode leaves it out alike and all of them
    compare on identical work."""
    from rm.config import RunConfig, TokenizerConfig
    from rm.config.rundir import RunDir
    from rm.tokens.encode import encode_kept
    from rm.tokens.prepare import train_run_bpe

    work.mkdir(parents=True, exist_ok=True)
    cfg = RunConfig(output_dir=str(work), tokenizer=TokenizerConfig(vocab_size=vocab, train_pairs=0))
    tok = train_run_bpe(cfg, bpe_on, is_main=True)
    fitted: dict[str, list[dict | None]] = {}
    for name, items in sets.items():
        split, report, positions = encode_kept(items, tok, max_length, sorted({x.subset for x in items}))
        prompts = split.table.column("prompt_ids").to_pylist()
        responses = split.table.column("response_ids").to_pylist()
        out: list[dict | None] = [None] * len(items)
        for k, at in enumerate(positions.tolist()):
            if report.pair_tokens[at] <= max_length:  # its length before fitting: nothing was cut or dropped
                out[at] = {"prompt": prompts[k], "responses": responses[k]}
        fitted[name] = out
    return Prepared(tok, RunDir(work).tokenizer, fitted)


def as_pair(ids: dict) -> dict:
    """A fitted pair as the benchmarks' workers read it: {"prompt", "chosen", "rejected": ids}."""
    chosen, rejected = ids["responses"]
    return {"prompt": ids["prompt"], "chosen": chosen, "rejected": rejected}


@dataclass
class BenchPairs:
    """Token ids every mode uses, so all of them train on exactly the same pairs and tokens."""

    work: Path
    tokenizer_dir: Path
    data_dir: Path
    train: list[dict]
    """{"prompt": ids, "chosen": ids, "rejected": ids} per training pair."""
    eval: list[dict]
    dropped: int
    """Pairs left out because they do not fit `max_length` whole."""


def bench_pairs(data: Path, work: Path, n_eval: int, max_length: int, vocab: int, seed: int, limit: int) -> BenchPairs:
    """Read the HH file, hold out `n_eval` pairs (seeded), train the BPE on the rest, keep the pairs that fit whole
    (`prepare`); `limit` keeps the first that many training pairs (0: all)."""
    pairs = load_examples(data)
    random.Random(seed).shuffle(pairs)
    held, train = pairs[:n_eval], pairs[n_eval:]
    prepared = prepare(train, {"train": train, "eval": held}, work, vocab, max_length)
    kept = {
        name: [(p, as_pair(ids)) for p, ids in zip(group, prepared.fitted[name], strict=True) if ids is not None]
        for name, group in (("train", train), ("eval", held))
    }
    dropped = len(pairs) - len(kept["train"]) - len(kept["eval"])
    if limit:
        kept["train"] = kept["train"][:limit]
    # The same pairs as an hh-rlhf-layout directory, for rm's own loader.
    root = work / "hh" / "harmless-base"
    root.mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "train"), ("test", "eval")):
        rows = [json.dumps({"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected}) for p, _ in kept[name]]
        (root / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    ids = {name: [i for _, i in kept[name]] for name in ("train", "eval")}
    (work / "ids.json").write_text(json.dumps(ids))
    return BenchPairs(work, prepared.tokenizer_dir, work / "hh", ids["train"], ids["eval"], dropped)


def load_ids(work: Path) -> dict:
    return json.loads((work / "ids.json").read_text())


def random_model(vocab: int, pad: int, eos: int | None, seed: int):
    """The benchmark model, initialised identically in every mode."""
    from rm.config import ModelConfig, RandomInitConfig
    from rm.model.build import build_model

    torch.manual_seed(seed)
    cfg = ModelConfig(random_init=RandomInitConfig(max_position_embeddings=1024, **MODEL))
    return build_model(cfg, vocab, pad, eos)


def useful_flops(pairs: list[dict], n_params: int, layers: int, hidden: int, backward: bool) -> float:
    """FLOPs a pair needs with its prompt counted once: 2N per token for the matmuls, plus attention
    (4 * context * hidden per token and layer for QK^T and AV), times 3 with the backward pass."""
    total = 0.0
    for p in pairs:
        n_p, n_c, n_r = len(p["prompt"]), len(p["chosen"]), len(p["rejected"])
        tokens = n_p + n_c + n_r
        # Keys each token attends to: i + 1 in the prompt, prompt + own prefix in each response.
        context = n_p * (n_p + 1) / 2 + n_c * n_p + n_c * (n_c + 1) / 2 + n_r * n_p + n_r * (n_r + 1) / 2
        total += 2 * n_params * tokens + 4 * hidden * layers * context
    return total * (3 if backward else 1)


def computed_flops(slots: int, scores: int, n_params: int, layers: int, hidden: int) -> float:
    """FLOPs a run's forward and backward passes computed, padding and masked attention included: 2N per
    token slot for the matmuls, 4 * hidden per query-key product and layer (QK^T and AV), times 3."""
    return 3 * (2 * n_params * slots + 4 * hidden * layers * scores)


def matmul_gflops(seconds: float = 1.5, n: int = 1024) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        done += 1
    return 2 * n**3 * done / (time.perf_counter() - start) / 1e9


class Progress:
    """A worker's log: one JSON line per step with a monotonic timestamp (comparable across processes)."""

    def __init__(self, path: Path):
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - open for the worker's whole life
        self.pairs = self.tokens = self.slots = self.scores = 0

    def step(self, pairs: int, tokens: int, slots: int, loss: float | None = None, scores: int = 0) -> None:
        """Add a step's work; `scores` counts the query-key products its attention computed (rows x width^2
        for a dense mask, which the CPU kernels compute whole, masked or not)."""
        self.pairs += pairs
        self.tokens += tokens
        self.slots += slots
        self.scores += scores
        row = {"t": time.monotonic(), "pairs": self.pairs, "tokens": self.tokens, "slots": self.slots}
        row |= {"scores": self.scores, "loss": loss}
        self.f.write(json.dumps(row) + "\n")

    def finish(self, **fields) -> None:
        fields["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        self.f.write(json.dumps({"done": True, **fields}) + "\n")
        self.f.close()


def pause_until_conducted() -> None:
    """Set-up is done: stop here until the conductor gives this process its first turn."""
    os.kill(os.getpid(), signal.SIGSTOP)


def conduct(
    commands: dict[str, list[str]], work: Path, slice_s: float, total_pairs: int = 0
) -> tuple[dict, list[float]]:
    """Run the workers in turns; return ({mode: [(start, end), ...]}, matmul GFLOP/s samples).
    With `total_pairs` (what each mode does in all), a mode ahead of the others skips rounds (`due`).

    Whatever ends the run (a worker failing, Ctrl-C, a `kill`), no worker outlives it: a paused worker ignores
    SIGTERM until continued, and left behind it holds its memory (six ~30M-model workers fill 24 GB).
    SIGTERM ends Python without running `finally`, so here it raises SystemExit instead."""
    procs: dict[str, subprocess.Popen] = {}
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _turns(commands, work, slice_s, total_pairs, procs)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for p in procs.values():
            if p.poll() is None:
                p.kill()  # SIGKILL ends a stopped process too
                p.wait()


def _terminated(signum: int, frame) -> None:
    raise SystemExit("benchmark terminated (SIGTERM); its workers were killed")


def _turns(
    commands: dict[str, list[str]],
    work: Path,
    slice_s: float,
    total_pairs: int,
    procs: dict[str, subprocess.Popen],
) -> tuple[dict, list[float]]:
    for mode, cmd in commands.items():  # set up one at a time so set-up work does not overlap
        log = open(work / f"{mode}.log", "w")  # noqa: SIM115
        procs[mode] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        while True:
            state = _state(procs[mode].pid)
            if state in ("T", "t") or procs[mode].poll() is not None:
                break
            time.sleep(0.2)
        if procs[mode].poll() not in (None, 0):
            raise SystemExit(f"{mode} failed during set-up; see {work / f'{mode}.log'}")
        print(f"  {mode}: set up", flush=True)
    turns: dict[str, list[tuple[float, float]]] = {m: [] for m in commands}
    peaks = [matmul_gflops()]
    live = list(commands)
    order = list(commands)
    done = dict.fromkeys(commands, 0)  # pairs each mode has done, read from its progress after every round
    while live:
        start_at = (len(peaks) - 1) % len(order)
        running = set(due({m: done[m] for m in live}, total_pairs)) if total_pairs else set(live)
        for mode in [m for m in order[start_at:] + order[:start_at] if m in running]:
            p = procs[mode]
            start = time.monotonic()
            p.send_signal(signal.SIGCONT)
            try:
                p.wait(timeout=slice_s)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGSTOP)
                # poll() as well: a worker that exits as its turn ends becomes a zombie, never stopped
                while p.poll() is None and _state(p.pid) not in ("T", "t"):
                    time.sleep(0.01)
            turns[mode].append((start, time.monotonic()))
            if p.poll() is not None and p.returncode != 0:
                raise SystemExit(f"{mode} failed (exit {p.returncode}); see {work / f'{mode}.log'}")
        live = [m for m in live if procs[m].poll() is None]
        peaks.append(matmul_gflops())
        done = {m: _last(work / f"{m}.progress").get("pairs", 0) for m in commands}
        print(f"  round {len(peaks) - 1}: {sum(done.values())} pairs done so far", flush=True)
    return turns, peaks


def due(done: dict[str, int], total_pairs: int) -> list[str]:
    """The modes that take a turn this round: those no further through their work than the one furthest
    behind (within 1%, or all while no mode has done any). A fast mode then waits for the slow ones
    between its turns, so every mode runs in every phase of the run, in turns of the same length."""
    behind = min(done.values()) / total_pairs
    return [m for m, n in done.items() if n / total_pairs <= behind + 0.01]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "X"


def _last(path: Path) -> dict:
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    steps = [r for r in rows if "t" in r]
    return steps[-1] if steps else {}


def rates(path: Path, turns: list[tuple[float, float]], work: Callable[[dict], float] | None = None) -> dict:
    """Median per-turn rates (pairs, tokens, slots per second) and the worker's final record.

    A step can straddle turns, so each step's duration is the time it actually ran: the overlap
    of (previous step's end, its own end) with the worker's turns. A turn's rate is the work of
    the steps that ended in it over their running time; the first turn (warm-up) is left out.

    A turn's pairs/s also depends on which pairs it drew (a turn of long pairs is slow). With `work`
    (the cost of a stretch of steps, from its pairs, tokens, slots and scores: the FLOPs it computed),
    `work_pairs_per_s` is the median over turns of the turn's work per second in this worker's pairs
    (its whole run's pairs per unit of work), a rate whose time-weighted mean is the whole run's
    pairs/s and whose spread is the machine's, not the data's.
    """
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    steps = [r for r in rows if "t" in r]
    final = next((r for r in rows if r.get("done")), {})
    keys = ("pairs", "tokens", "slots", "scores")

    def running(t0: float, t1: float) -> float:
        return sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in turns)

    per_turn: list[dict[str, float]] = [{k: 0 for k in keys} | {"time": 0.0} for _ in turns]
    previous = {"t": turns[0][0]} | {k: 0 for k in keys}
    for r in steps:
        k = next((i for i, (a, b) in enumerate(turns) if a <= r["t"] <= b), len(turns) - 1)
        bucket = per_turn[k]
        for key in keys:
            bucket[key] += r.get(key, 0) - previous.get(key, 0)
        bucket["time"] += running(previous["t"], r["t"])
        previous = r
    counted = [b for b in per_turn[1:] if b["time"] > 0 and b["pairs"] > 0]
    out = {
        f"{k}_per_s": statistics.median(b[k] / b["time"] for b in counted) if counted else float("nan")
        for k in ("pairs", "tokens", "slots")
    }
    per_s = [b["pairs"] / b["time"] for b in counted]
    out["pairs_per_s_min"], out["pairs_per_s_max"] = (min(per_s), max(per_s)) if per_s else (float("nan"),) * 2
    if work is not None and counted:
        pairs_per_work = steps[-1]["pairs"] / work(steps[-1])
        normalized = [work(b) / b["time"] * pairs_per_work for b in counted]
        out["work_pairs_per_s"] = statistics.median(normalized)
        out["work_pairs_per_s_min"], out["work_pairs_per_s_max"] = min(normalized), max(normalized)
    out["turns"] = len(counted)
    total_time = sum(b["time"] for b in per_turn)
    out["overall_pairs_per_s"] = (steps[-1]["pairs"] / total_time) if steps and total_time else float("nan")
    out["losses"] = [r["loss"] for r in steps if r.get("loss") is not None]
    return {**out, **final}


def arguments(doc: str, work: str, budget: int, slice_s: float) -> argparse.ArgumentParser:
    """The options both benchmarks take; each adds its own."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--work", type=Path, default=REPO / "runs" / work)
    ap.add_argument("--modes", default="trl,rm-padded,rm-shared")
    ap.add_argument("--limit", type=int, default=0, help="use at most this many pairs (smoke runs)")
    ap.add_argument("--budget", type=int, default=budget, help="rm shared: token budget per micro-batch")
    ap.add_argument("--slice", type=float, default=slice_s, help="seconds per turn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    return ap


def non_embedding_params() -> int:
    """Parameters that do matmul work per token (the embedding lookup does none)."""
    model = random_model(100, 0, None, 0)
    return sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()


def summary_line(rows: dict, extra: dict | None = None) -> str:
    """The last line of both benchmarks: median pairs/s per mode and shared's speed-up over TRL (+ `extra`)."""
    speeds = {m: rows[m]["pairs_per_s"] if m in rows else float("nan") for m in ("trl", "rm-padded", "rm-shared")}
    line = {
        "trl_pairs_per_s": round(speeds["trl"], 3),
        "padded_pairs_per_s": round(speeds["rm-padded"], 3),
        "shared_pairs_per_s": round(speeds["rm-shared"], 3),
    }
    line["speedup_vs_trl"] = round(line["shared_pairs_per_s"] / line["trl_pairs_per_s"], 3)
    return json.dumps(line | (extra or {}))


def rm_overrides(
    work: Path, mode: str, source: Path, layout: str, batch: int, budget: int, seed: int, lr: float, grouped: bool
) -> list[str]:
    """rm's config for one benchmark worker: the benchmark's model, one epoch of `batch` items (pairs or groups)
    per optimizer step at a fixed count, linear decay from `lr` without warm-up, nothing exported."""
    m = MODEL
    return [
        f"output_dir={work / mode}",
        "train.overwrite=true",  # a rerun of the benchmark in the same --work folder
        f"data.source={source}",
        f"data.cache_dir={work / 'cache'}",
        f"tokenizer.name_or_path={work / 'tokenizer'}",
        f"model.random_init.hidden_size={m['hidden_size']}",
        f"model.random_init.num_hidden_layers={m['num_hidden_layers']}",
        f"model.random_init.num_attention_heads={m['num_attention_heads']}",
        f"model.random_init.intermediate_size={m['intermediate_size']}",
        "model.random_init.max_position_embeddings=1024",
        "collator.max_length=512",
        f"collator.layout={layout}",
        "collator.max_tokens=0",  # a fixed count per step in every mode; packed layouts pack inside the batch
        f"collator.group_by_length={str(grouped).lower()}",
        f"collator.eval_max_tokens={4 * budget if layout != 'padded' else 0}",
        f"train.batch_size={batch}",
        "train.eval_batch_size=32",
        "train.epochs=1",
        f"train.lr={lr}",
        "train.scheduler=linear",
        "train.warmup_ratio=0",
        "train.report_to=[]",
        "train.log_steps=1000000",
        f"train.seed={seed}",
        "export.enabled=false",
    ]


def mode_rates(work: Path, modes: list[str], turns: dict, computed: Callable[[dict], float]) -> dict[str, dict]:
    """`rates` of each mode with the headline `pairs_per_s` (and its min-max) the per-turn median of computed
    FLOPs per second in the mode's own pairs (the raw median kept as `raw_pairs_per_s`), plus the mode's
    whole-run `slots_per_pair` and `computed_flops_per_pair`."""
    rows = {}
    for m in modes:
        r = rates(work / f"{m}.progress", turns[m], computed)
        r["raw_pairs_per_s"] = r["pairs_per_s"]
        # no counted turn (a run of a step or two): nan, as `rates` gives its other figures
        for key in ("", "_min", "_max"):
            r[f"pairs_per_s{key}"] = r.get(f"work_pairs_per_s{key}", float("nan"))
        last = _last(work / f"{m}.progress")
        r["slots_per_pair"] = last["slots"] / last["pairs"] if last.get("pairs") else float("nan")
        r["computed_flops_per_pair"] = computed(last) / last["pairs"] if last.get("pairs") else float("nan")
        rows[m] = r
    return rows


def accuracy_se(accuracy: float, n: int) -> float:
    """The binomial standard error of an accuracy over `n` held-out pairs."""
    return (accuracy * (1 - accuracy) / max(1, n)) ** 0.5
