"""Reward-server throughput under GRPO-shaped load: `rm serve` /score and /score_groups against a plain
transformers server, on the same export and the same requests, interleaved.

    python scripts/bench_serve.py                          # small model, 32 clients, 3 turns of 20 s per mode
    python scripts/bench_serve.py --size medium            # the ~30M-parameter Llama
    python scripts/bench_serve.py --seconds 10 --turns 2   # a quick run
    python scripts/bench_serve.py --layouts                # also (b'): groups in packed rows (--no-prefix-cache)
    python scripts/bench_serve.py --ensemble               # 3 LoRA members: one `rm serve --ensemble` vs 3 servers
    python scripts/bench_serve.py --verl                   # verl's per-sample calls: one /score each vs the adapter

Set-up (cached in --work per size and seed): the real harmless-base pairs, a BPE of 8,192 tokens trained on
them and the benchmark model of scripts/bench_train.py (`--size small`: Llama, hidden 256 x 4 layers; `medium`:
512 x 8), random-init and exported as rm exports a run. Each request is a GRPO rollout group: one HH prompt with
8 completions (its own chosen and rejected answers and those of the next three prompts), kept only where the
prompt and its longest completion fit max_length (512), so no mode truncates anything.

Modes, each its own server process on localhost, all started before the first turn:
- (a) `rm-score`: `rm serve`'s /score with the 8 texts prompt + completion, each its own text (rm's /score scores
  a request's texts whose prompts have the same ids as one group, so its prompt is computed once here too: the
  tokens (a) computes are counted from the server's /info and printed beside the nominal ceiling, which assumes
  a server that computes every text's prompt, as (c) does);
- (b) `rm-groups`: `rm serve`'s /score_groups with the group (its prompt computed once);
- (c) `baseline`: a plain transformers server (Starlette + uvicorn, as small as such servers are written):
  AutoModelForSequenceClassification on each request's texts as one padded batch, requests one at a time, no
  coalescing. OpenRLHF's serve_rm is not used: OpenRLHF installs only with CUDA (flash-attn), and on the CPU
  its server needs the stand-ins of scripts/clients/check_client.py plus FastAPI in the client venv.

A turn runs one load process (C concurrent clients on one asyncio loop, in a process of its own) against one
mode for --seconds after a warm-up that is not counted (--warmup seconds, and at least two rounds of answers);
turns go A B C A B C ...; the table quotes the median over turns of requests/s and responses/s (completions
scored), by Little's law from the latencies of the requests sent in the window (see `load`; the responses answered
inside the window per second beside it, as a cross-check), latency percentiles over those requests,
errors (a non-200 reply or a reply with the wrong number of rewards), lost requests (sent, never answered), and
the server's peak RSS (VmHWM, the server and its children).

With --ensemble the modes are (e) one `rm serve RUN0 --ensemble RUN1 RUN2` holding three LoRA members on one base
(LoRA r=16 runs of the benchmark model, each a run directory whose checkpoint keeps its adapter: drawn, not trained,
since speed and memory do not depend on what the adapters learned) and (s) the three runs each behind its own `rm
serve RUN_i` (each a merged model with --threads torch threads, as three `rm serve` with their defaults take every
core each; --split-threads gives each a third), every request sent to all three at once and done when all three
have answered: what a client does without the ensemble.
Both get /score_groups with the same GRPO groups, interleaved E S E S ...; the table adds (e)/(s) throughput, and
(e)'s peak RSS against one (s) server's plus the three adapters, twice: once the servers have loaded (the weights
held, loading's own peak included) and at the end (activations included, which vary from server to server). Targets:
(e) >= 90% of (s); (e)'s peak RSS within 10% of one base plus three adapters. Each load process is bounded in requests
(--max-requests) and time (each request's timeout, and the process's). The same run prints the token ceiling of
(b) over (a): the tokens /score computes over the tokens /score_groups computes for the same requests, and the
measured (b)/(a) as a fraction of it; then the tokens each rm server reports it computed per response (its
/info counters), the ceiling over what (a) really computed, and the model thread's busy share per mode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "scripts"))

from get_hh_data import hh_data_root  # noqa: E402

DEFAULT_DATA = hh_data_root() / "harmless-base" / "test.jsonl.gz"  # $RM_HH_DATA, make data, or ../shared
MAX_LENGTH = 512
VOCAB = 8192
GROUP = 8
MODES = ("rm-score", "rm-groups", "baseline")
PACKED = "rm-groups-packed"
"""With --layouts: /score_groups again on a server started with --no-prefix-cache (groups in packed rows)."""
THEN = {"rm-score-then": "rm-score", "rm-groups-then": "rm-groups"}
"""With --against TREE: (a) and (b) again on a server running TREE's rm (another checkout, e.g. a git worktree of
an earlier commit), interleaved with the others: a before/after comparison within one run."""
ENSEMBLE, SEPARATE = "rm-ensemble", "rm-three"
"""With --ensemble: one server holding three LoRA members, and the same members behind three servers."""
GROUPED = ("rm-groups", PACKED, "rm-groups-then", ENSEMBLE, SEPARATE)
ROUTES = {"rm-score": "/score", "rm-groups": "/score_groups", "baseline": "/score", PACKED: "/score_groups"}
ROUTES |= {"rm-score-then": "/score", "rm-groups-then": "/score_groups", ENSEMBLE: "/score_groups"}
ROUTES |= {SEPARATE: "/score_groups"}
LORA_R = 16
LABELS = {
    "rm-score": "(a) rm serve /score",
    "rm-groups": "(b) rm serve /score_groups",
    "baseline": "(c) baseline",
    PACKED: "(b') /score_groups, packed rows",
    "rm-score-then": "(a) at --against",
    "rm-groups-then": "(b) at --against",
    ENSEMBLE: "(e) rm serve --ensemble, 3 LoRA members",
    SEPARATE: "(s) 3 rm serve, one member each",
}


# --- set-up: export and requests ---------------------------------------------------------------------------


def prepare(data: Path, folder: Path, size: str, seed: int) -> dict:
    """The export and the request pool in `folder` (built once per size and seed), and the pool's token counts."""
    done = folder / "requests.json"
    if done.exists():
        return json.loads(done.read_text())
    import benchlib

    from rm.config import CollatorConfig, RunConfig
    from rm.data.formats.group import Group
    from rm.export.folder import Weights, export_model
    from rm.tokens.tokenizer import special_prefix

    pairs = benchlib.load_examples(data)
    groups = []
    for i, p in enumerate(pairs):
        others = [pairs[(i + k) % len(pairs)] for k in range(GROUP // 2)]
        completions = [a for q in others for a in (q.chosen, q.rejected)]
        # One-turn answers only: an answer holding later turns would be split at its own last "Assistant:" tag
        # as a flat text, and the modes would not score the same prompt and answer.
        if not any(not c.strip() or "\n\nAssistant:" in c or "\n\nHuman:" in c for c in completions):
            groups.append(Group(p.prompt, tuple(completions), tuple(range(GROUP)), p.subset, origin=p.origin))
    # The BPE learns every pair's texts; a group is kept only where its prompt and longest completion fit whole.
    prepared = benchlib.prepare(pairs, {"requests": groups}, folder, VOCAB, MAX_LENGTH)
    tok = prepared.tokenizer
    benchlib.set_size(size)
    model = benchlib.random_model(len(tok), tok.pad_token_id, tok.eos_token_id, seed)
    cfg = RunConfig(collator=CollatorConfig(max_length=MAX_LENGTH))
    export_model(model, tok, folder / "export", cfg, Weights(None, None))
    prefix = len(special_prefix(tok))  # token counts as rm counts them: prompt and answer apart, no special tokens
    requests = [
        {
            "prompt": g.prompt,
            "completions": list(g.responses),
            "prompt_tokens": len(ids["prompt"]) - prefix,
            "completion_tokens": [len(r) for r in ids["responses"]],
        }
        for g, ids in zip(groups, prepared.fitted["requests"], strict=True)
        if ids is not None
    ]
    pool = {"requests": requests, "size": size, "model": dict(benchlib.MODEL), "pairs": len(pairs)}
    done.write_text(json.dumps(pool))
    return pool


def ceiling(requests: list[dict]) -> tuple[float, int, int]:
    """(flat tokens / group tokens, flat, group): what /score computes for the requests (the prompt with each
    completion) over what /score_groups computes (the prompt once, then the completions)."""
    flat = sum(r["prompt_tokens"] * len(r["completion_tokens"]) + sum(r["completion_tokens"]) for r in requests)
    group = sum(r["prompt_tokens"] + sum(r["completion_tokens"]) for r in requests)
    return flat / group, flat, group


def body(mode: str, request: dict) -> bytes:
    if mode in GROUPED:
        return json.dumps({"groups": [{"prompt": request["prompt"], "responses": request["completions"]}]}).encode()
    return json.dumps({"texts": [request["prompt"] + c for c in request["completions"]]}).encode()


# --- the load process ----------------------------------------------------------------------------------------


async def load(
    url: str,
    mode: str,
    requests: list[dict],
    clients: int,
    seconds: float,
    warmup: float,
    max_requests: int,
    seed: int,
    timeout: float,
    transport=None,
) -> dict:
    """C clients, each sending its next request as soon as its last one is answered: a warm-up, then a measured
    window of `seconds`.

    The server answers in bursts (one per round of its batcher: every request queued while a round ran is
    scored in the next), and a round of the medium model is longer than a short window, so answers counted in a
    window measure where its edges fell. The rate is taken from Little's law instead: C clients that always have
    one request outstanding get C / (mean latency) requests per second, the latencies being those of the requests
    sent inside the window (each waited for to its end, so no burst is cut). Answers counted inside the window
    are kept as a cross-check (`counted_responses_per_s`). The warm-up lasts `warmup` seconds and at least until
    2C requests have been answered (two rounds: the first round holds only the first request). Every request sent
    is waited for (answered, an error, or its timeout), so `lost` (sent, never ended) is checked, not assumed.
    `transport`: an httpx transport in place of the network (tests/client/test_bench_serve.py)."""
    import httpx

    order = list(range(len(requests)))
    random.Random(seed).shuffle(order)
    bodies = [body(mode, requests[i]) for i in order]
    expected = [len(requests[i]["completions"]) for i in order]
    headers = {"content-type": "application/json"}
    sent = ended = errors = answered = counted = 0
    window: list[tuple[float, int]] = []  # (latency, responses answered: 0 for an error) per request sent in it
    first_error = ""
    start = time.monotonic()
    give_up = start + warmup + seconds + 3 * timeout  # a server that stops answering ends the run, bounded
    t0 = t1 = math.inf

    async def one(client: httpx.AsyncClient, k: int) -> None:
        nonlocal ended, errors, answered, counted, first_error, t0, t1
        began = time.monotonic()
        try:  # (s): the request to every server at once, done when all have answered
            targets = [u + ROUTES[mode] for u in url.split(",")] if mode == SEPARATE else [ROUTES[mode]]
            replies = await asyncio.gather(*(client.post(t, content=bodies[k], headers=headers) for t in targets))
            ok, why = True, ""
            for reply in replies:
                rewards = reply.json().get("rewards") if reply.status_code == 200 else None
                if mode in GROUPED and rewards:
                    rewards = rewards[0]
                if not (isinstance(rewards, list) and len(rewards) == expected[k]):
                    ok, why = False, f"HTTP {reply.status_code}: {reply.text[:200]}"
        except (httpx.HTTPError, ValueError) as e:
            ok, why = False, f"{type(e).__name__}: {e}"[:200]
        finished = time.monotonic()
        ended += 1
        if t0 <= began <= t1:  # an error holds its client too: it counts in the latency, with no responses
            window.append((finished - began, expected[k] if ok else 0))
        if not ok:
            errors += 1
            first_error = first_error or why
            return
        answered += 1
        if t0 <= finished <= t1:
            counted += expected[k]
        if t0 == math.inf and answered >= 2 * clients and finished >= start + warmup:
            t0, t1 = finished, finished + seconds

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal sent
        while time.monotonic() < min(t1, give_up) and sent < max_requests:
            k = sent % len(bodies)
            sent += 1
            await one(client, k)

    servers = len(url.split(","))
    limits = httpx.Limits(max_connections=clients * servers, max_keepalive_connections=clients * servers)
    base = url.split(",")[0]
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits, transport=transport) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    mean_latency = statistics.fmean(w for w, _ in window) if window else math.nan
    good = [(w, n) for w, n in window if n]
    return {  # Little's law: every request (an error too) occupies a client; the rates count the answered ones
        "requests_per_s": clients / mean_latency * len(good) / len(window) if window else math.nan,
        "responses_per_s": clients / mean_latency * statistics.fmean(n for _, n in window) if window else math.nan,
        "counted_responses_per_s": counted / seconds if t1 < math.inf else math.nan,
        "latencies": [w for w, _ in good],
        "sent": sent,
        "errors": errors,
        "lost": sent - ended,
        "first_error": first_error,
    }


# --- the baseline server -------------------------------------------------------------------------------------


def baseline_server(export: Path, threads: int) -> None:
    """A plain transformers reward server: each /score request's texts one padded batch, one request at a time."""
    import socket
    import threading

    import torch
    import uvicorn
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(export)
    model = AutoModelForSequenceClassification.from_pretrained(export).eval()
    lock = threading.Lock()  # one forward at a time: concurrent ones would fight over the same cores

    def score(texts: list[str]) -> list[float]:
        with lock, torch.inference_mode():
            batch = tok(texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
            return model(**batch).logits[:, 0].tolist()

    async def score_route(request):
        texts = (await request.json())["texts"]
        return JSONResponse({"rewards": await run_in_threadpool(score, texts)})

    async def health(request):
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/score", score_route, methods=["POST"]), Route("/health", health)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"baseline on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


# --- the conductor -------------------------------------------------------------------------------------------


def start_servers(
    export: Path, work: Path, threads: int, server_args: list[str], modes: list[str], against: Path | None = None
) -> dict[str, tuple]:
    """Every mode's server process (the --against modes running `against`'s rm); (process, url) once each answers
    /health."""
    rm_cmd = [sys.executable, "-m", "rm", "serve", str(export), "--port", "0", "--num-threads", str(threads)]
    rm_cmd += server_args
    commands = {
        "rm-score": rm_cmd,
        "rm-groups": rm_cmd,
        "baseline": [sys.executable, __file__, "--baseline-server", str(export), "--threads", str(threads)],
        PACKED: [*rm_cmd, "--no-prefix-cache"],
        **{mode: rm_cmd for mode in THEN},
    }
    commands = {mode: commands[mode] for mode in modes}
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    procs = {}
    for mode, cmd in commands.items():
        tree = against if mode in THEN else REPO
        log = open(work / f"server-{mode}.log", "w")  # noqa: SIM115 - the server's whole life
        procs[mode] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tree, env=env | {"PYTHONPATH": str(tree)}
        )
    return {mode: (p, wait_url(p, work / f"server-{mode}.log")) for mode, p in procs.items()}


def wait_url(proc: subprocess.Popen, log: Path, timeout: float = 600) -> str:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"a server ended (exit {proc.returncode}) during set-up; see {log}")
        found = re.search(r"on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
        if found:
            try:
                if httpx.get(found.group(1) + "/health", timeout=5).status_code == 200:
                    return found.group(1)
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    raise SystemExit(f"no server answered within {timeout} s; see {log}")


def peak_rss_mb(pid: int) -> float:
    """VmHWM of the process and of its children (a server's worker processes), in MB."""
    family, total = {pid}, 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            family.add(int(stat.parent.name))
    for p in family:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        found = re.search(r"VmHWM:\s+(\d+) kB", status)
        total += int(found.group(1)) / 1024 if found else 0.0
    return total


def same_rewards(servers: dict[str, tuple], request: dict) -> float:
    """The largest difference between the modes' rewards for one request (they score the same texts)."""
    import httpx

    got = []
    for mode, (_, url) in servers.items():
        rewards = httpx.post(url + ROUTES[mode], content=body(mode, request), timeout=120).json()["rewards"]
        got.append(rewards[0] if mode in GROUPED else rewards)
    return max(abs(a - b) for other in got[1:] for a, b in zip(got[0], other, strict=True))


def counters(url: str, mode: str) -> dict[str, float]:
    """The rm server's model-thread seconds, sequences scored and tokens computed so far (GET /info); zeros for
    the baseline, which does not say."""
    import httpx

    if not mode.startswith("rm-"):
        return {"busy_seconds": 0.0, "scored": 0, "tokens": 0}
    infos = [httpx.get(u + "/info", timeout=30).json() for u in url.split(",")]  # (s): the three servers' sums
    return {k: sum(float(info[k]) for info in infos) for k in ("busy_seconds", "scored", "tokens")}


def run_turn(url: str, mode: str, work: Path, args: argparse.Namespace, seed: int) -> dict:
    before, started = counters(url, mode), time.monotonic()
    result = load_turn(url, mode, work, args, seed)
    after = counters(url, mode)
    result["busy"] = (after["busy_seconds"] - before["busy_seconds"]) / (time.monotonic() - started)
    result["tokens_per_response"] = (after["tokens"] - before["tokens"]) / max(1.0, after["scored"] - before["scored"])
    return result


def load_turn(url: str, mode: str, work: Path, args: argparse.Namespace, seed: int) -> dict:
    cmd = [sys.executable, __file__, "--load", url, "--mode", mode, "--work", str(work), "--clients", str(args.clients)]
    cmd += ["--seconds", str(args.seconds), "--warmup", str(args.warmup), "--max-requests", str(args.max_requests)]
    cmd += ["--seed", str(seed), "--pool", str(args.pool_file)]
    limit = args.warmup + args.seconds + 4 * args.request_timeout + 60  # load() gives up after 3 timeouts
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"the load process failed for {mode}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else float("nan")


def report(results: dict[str, list[dict]], peaks: dict[str, float], ratio: float) -> dict:
    rows = table(results, peaks)
    a, b, c = (rows[m]["responses_per_s"] for m in MODES)
    speedup, over_c = b / a, b / c
    errors = sum(r["errors"] + r["lost"] for r in rows.values())
    print(
        f"\ntoken ceiling of (b) over (a): {ratio:.3f}x; measured (b)/(a) {speedup:.3f}x = {speedup / ratio:.1%} "
        f"of it; (b)/(c) {over_c:.3f}x"
    )
    checks = {
        "(b) >= 2x (a)": speedup >= 2,
        "(b)/(a) >= 80% of the ceiling": speedup >= 0.8 * ratio,
        "(b) >= 2x (c)": over_c >= 2,
        "no errors, no request lost": errors == 0,
    }
    print("targets: " + "; ".join(f"{k}: {'met' if ok else 'NOT met'}" for k, ok in checks.items()))
    computed = rows["rm-score"]["tokens_per_response"] / rows["rm-groups"]["tokens_per_response"]
    print(
        f"tokens the server computed per response: (a) {rows['rm-score']['tokens_per_response']:.0f} (/score "
        "computes a prompt once for a request's texts that share it), "
        f"(b) {rows['rm-groups']['tokens_per_response']:.0f}; "
        f"so the ceiling over what (a) computed is {computed:.3f}x, and (b)/(a) is {speedup / computed:.1%} of it"
    )
    if PACKED in rows:
        print(f"(b) on cached prompts over (b') in packed rows: {b / rows[PACKED]['responses_per_s']:.3f}x")
    for then, now in THEN.items():
        if then in rows:
            ratio_then = rows[now]["responses_per_s"] / rows[then]["responses_per_s"]
            print(f"{LABELS[now]} over the same at --against: {ratio_then:.3f}x")
    summary = {m: round(r["responses_per_s"], 2) for m, r in rows.items()}
    return summary | {
        "ceiling": round(ratio, 3),
        "b_over_a": round(speedup, 3),
        "b_over_c": round(over_c, 3),
        "fraction_of_ceiling": round(speedup / ratio, 3),
        "computed_ceiling": round(computed, 3),
        "errors": errors,
    }


def table(results: dict[str, list[dict]], peaks: dict[str, float]) -> dict[str, dict]:
    """Each mode's medians over turns, latency percentiles, counts and peak RSS, printed as a Markdown table."""
    rows = {}
    for mode, turns in results.items():
        lat = [x for t in turns for x in t["latencies"]]
        rows[mode] = {
            "requests_per_s": statistics.median(t["requests_per_s"] for t in turns),
            "responses_per_s": statistics.median(t["responses_per_s"] for t in turns),
            "counted": statistics.median(t["counted_responses_per_s"] for t in turns),
            "p50_ms": 1000 * percentile(lat, 50),
            "p95_ms": 1000 * percentile(lat, 95),
            "p99_ms": 1000 * percentile(lat, 99),
            "errors": sum(t["errors"] for t in turns),
            "lost": sum(t["lost"] for t in turns),
            "sent": sum(t["sent"] for t in turns),
            "peak_rss_mb": peaks[mode],
            "busy": statistics.median(t["busy"] for t in turns),
            "tokens_per_response": statistics.median(t["tokens_per_response"] for t in turns),
        }
    head = "requests/s | responses/s | (counted) | p50 ms | p95 ms | p99 ms | errors | lost | sent | peak RSS MB"
    print(f"\n| mode | {head} | model busy |\n| --- |" + " ---: |" * 11)
    for mode, r in rows.items():
        print(
            f"| {LABELS[mode]} | {r['requests_per_s']:.2f} | {r['responses_per_s']:.1f} | {r['counted']:.1f} | "
            f"{r['p50_ms']:.0f} | "
            f"{r['p95_ms']:.0f} | {r['p99_ms']:.0f} | {r['errors']} | {r['lost']} | {r['sent']} | "
            f"{r['peak_rss_mb']:.0f} | " + (f"{r['busy']:.0%} |" if mode.startswith("rm-") else "- |")
        )
    return rows


def conduct(args: argparse.Namespace) -> None:
    folder = args.work / f"{args.size}-seed{args.seed}"
    folder.mkdir(parents=True, exist_ok=True)
    pool = prepare(args.data, folder, args.size, args.seed)
    requests = pool["requests"]
    args.pool_file = folder / "requests.json"
    ratio, flat, group = ceiling(requests)
    print(
        f"{len(requests)} GRPO groups of {GROUP} from {pool['pairs']} HH pairs; model {args.size} {pool['model']}; "
        f"{flat / len(requests):.0f} tokens a request as flat texts, {group / len(requests):.0f} as a group"
    )
    modes = [*MODES, PACKED] if args.layouts else list(MODES)
    if args.against:
        modes += list(THEN)
    export, extra = folder.resolve() / "export", args.server_args.split()
    servers = start_servers(export, args.work, args.threads, extra, modes, args.against)
    try:
        print(
            f"servers up; largest reward difference between modes on one request: "
            f"{same_rewards(servers, requests[0]):.2e}",
            flush=True,
        )
        results: dict[str, list[dict]] = {m: [] for m in modes}
        for turn in range(args.turns):
            for mode in modes:
                r = run_turn(servers[mode][1], mode, args.work, args, seed=args.seed + turn)
                results[mode].append(r)
                print(
                    f"  turn {turn + 1} {mode}: {r['requests_per_s']:.2f} requests/s, {r['responses_per_s']:.1f} "
                    f"responses/s, {r['errors']} errors" + (f" ({r['first_error']})" if r["errors"] else ""),
                    flush=True,
                )
        peaks = {mode: peak_rss_mb(p.pid) for mode, (p, _) in servers.items()}
    finally:
        for p, _ in servers.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, _ in servers.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    print(json.dumps(report(results, peaks, ratio)))


# --- --ensemble: one server holding three LoRA members against three servers ------------------------------------


def lora_members(folder: Path, seed: int, n: int = 3) -> list[Path]:
    """`n` LoRA runs (r=LORA_R) of the benchmark model seeded `seed` (the export's base), their adapters and score-head
    copies drawn from seeds 1..n: each a finished run directory whose one checkpoint keeps its adapter, as training
    leaves a LoRA run whose last step was a save (built once per size and seed)."""
    runs = [folder / f"lora-r{LORA_R}-{i}" for i in range(n)]
    if all((run / "eval.json").exists() for run in runs):
        return runs
    import shutil

    import benchlib
    import torch
    from safetensors.torch import save_file

    from rm.config import CollatorConfig, LoraConfig, ModelConfig, RandomInitConfig, RunConfig
    from rm.config.rundir import STATE, write_config
    from rm.model.lora import add_lora, save_adapter_config
    from rm.model.reward import RewardModel
    from rm.tokens.tokenizer import load_tokenizer
    from rm.training.checkpoint_folder import seal

    tok = load_tokenizer(str(folder / "tokenizer"))
    shape = RandomInitConfig(max_position_embeddings=1024, **benchlib.MODEL)
    model = ModelConfig(random_init=shape, lora=LoraConfig(r=LORA_R))
    for i, run in enumerate(runs):
        shutil.rmtree(run, ignore_errors=True)
        cfg = RunConfig(model=model, collator=CollatorConfig(max_length=MAX_LENGTH), output_dir=str(run))
        peft = add_lora(benchlib.random_model(len(tok), tok.pad_token_id, tok.eos_token_id, seed), model.lora)
        g = torch.Generator().manual_seed(i + 1)
        with torch.no_grad():  # LoRA B starts at zero: draw every adapter tensor, so the members differ
            for name, p in peft.named_parameters():
                if ".default." in name:
                    p.add_(torch.randn(p.shape, generator=g) * 0.02)
        step = run / "checkpoints" / "step-1"
        step.mkdir(parents=True)
        shutil.copytree(folder / "tokenizer", run / "tokenizer")
        write_config(cfg, run / "config.yaml")
        write_config(cfg, step / "config.yaml")
        save_file({k: v.contiguous() for k, v in RewardModel(peft).state_dict().items()}, step / "model.safetensors")
        save_adapter_config(peft, step)
        (step / STATE).write_text(json.dumps({"step": 1, "max_steps": 1}))
        seal(step, 1)
        (run / "eval.json").write_text(json.dumps({"overall": {}, "subsets": {}, "train": {"steps": 1}}))
    return runs


def adapter_mb(run: Path) -> float:
    """MB of a run's adapter: its LoRA matrices and its score head's trained copy, as saved."""
    from safetensors import safe_open

    with safe_open(str(next(run.glob("checkpoints/step-*")) / "model.safetensors"), framework="pt") as f:
        tensors = [f.get_tensor(k) for k in f.keys() if ".default." in k]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def start_ensemble_servers(
    runs: list[Path], work: Path, threads: int, server_args: list[str], split: bool = False
) -> dict[str, list]:
    """(e) one server with the three members, (s) one server per member, each server with `threads` torch threads
    (as three `rm serve` with their defaults would take every core each), or with `split` a third of them each:
    every process started before any is waited for; {mode: [(process, url), ...]}."""
    base = [sys.executable, "-m", "rm", "serve", "--port", "0", *server_args]
    commands = {ENSEMBLE: [[*base, str(runs[0]), "--ensemble", *map(str, runs[1:]), "--num-threads", str(threads)]]}
    each = max(1, threads // len(runs)) if split else threads
    commands[SEPARATE] = [[*base, str(run), "--num-threads", str(each)] for run in runs]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    procs = {}
    for mode, cmds in commands.items():
        for i, cmd in enumerate(cmds):
            log = open(work / f"server-{mode}-{i}.log", "w")  # noqa: SIM115 - the server's whole life
            procs[(mode, i)] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    out: dict[str, list] = {ENSEMBLE: [], SEPARATE: []}
    for (mode, i), proc in procs.items():
        out[mode].append((proc, wait_url(proc, work / f"server-{mode}-{i}.log")))
    return out


def same_members(servers: dict[str, list], request: dict) -> float:
    """The largest difference between the ensemble's member rewards and each member's own server's, one request."""
    import httpx

    body_bytes = body(SEPARATE, request)
    url = servers[ENSEMBLE][0][1]
    members = httpx.post(url + "/score_groups", content=body_bytes, timeout=120).json()["member_rewards"][0]
    alone = [httpx.post(u + "/score_groups", content=body_bytes, timeout=120).json()["rewards"][0]
             for _, u in servers[SEPARATE]]  # fmt: skip
    return max(abs(row[m] - alone[m][k]) for k, row in enumerate(members) for m in range(len(alone)))


def conduct_ensemble(args: argparse.Namespace) -> None:
    import benchlib

    folder = args.work / f"{args.size}-seed{args.seed}"
    folder.mkdir(parents=True, exist_ok=True)
    pool = prepare(args.data, folder, args.size, args.seed)
    benchlib.set_size(args.size)
    runs = lora_members(folder.resolve(), args.seed)
    requests, args.pool_file = pool["requests"], folder / "requests.json"
    adapters = sum(adapter_mb(run) for run in runs)
    print(f"{len(requests)} GRPO groups of {GROUP}; model {args.size} {pool['model']}; 3 LoRA members (r={LORA_R}), "
          f"adapters {adapters:.1f} MB together; {args.threads} threads a server"
          + (", split among the three (s) servers" if args.split_threads else ""))  # fmt: skip
    servers = start_ensemble_servers(runs, args.work, args.threads, args.server_args.split(), args.split_threads)
    urls = {ENSEMBLE: servers[ENSEMBLE][0][1], SEPARATE: ",".join(u for _, u in servers[SEPARATE])}
    loaded = {mode: [peak_rss_mb(p.pid) for p, _ in found] for mode, found in servers.items()}  # before any request
    try:
        print(f"servers up; largest difference between a member's reward in (e) and in (s): "
              f"{same_members(servers, requests[0]):.2e}", flush=True)  # fmt: skip
        results: dict[str, list[dict]] = {ENSEMBLE: [], SEPARATE: []}
        for turn in range(args.turns):
            for mode in (ENSEMBLE, SEPARATE):
                r = run_turn(urls[mode], mode, args.work, args, seed=args.seed + turn)
                results[mode].append(r)
                print(f"  turn {turn + 1} {mode}: {r['requests_per_s']:.2f} requests/s, {r['responses_per_s']:.1f} "
                      f"responses/s, {r['errors']} errors" + (f" ({r['first_error']})" if r["errors"] else ""),
                      flush=True)  # fmt: skip
        each = {mode: [peak_rss_mb(p.pid) for p, _ in found] for mode, found in servers.items()}
    finally:
        for found in servers.values():
            for p, _ in found:
                p.send_signal(signal.SIGTERM) if p.poll() is None else None
        for found in servers.values():
            for p, _ in found:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
    rows = table(results, {mode: sum(peaks) for mode, peaks in each.items()})
    ratio = rows[ENSEMBLE]["responses_per_s"] / rows[SEPARATE]["responses_per_s"]
    errors = sum(r["errors"] + r["lost"] for r in rows.values())
    print(f"\n(e)/(s) throughput {ratio:.3f}x (the model busy column of (s) adds its three servers' shares)")
    held = memory(loaded, adapters, "after loading (the weights held, and loading's own peak)")
    peak = memory(each, adapters, "under load (activations included)")
    checks = {
        "(e) >= 90% of (s)": ratio >= 0.9,
        "(e) loaded peak RSS <= base + 3 adapters + 10%": held,
        "(e) peak RSS under load <= base + 3 adapters + 10%": peak,
        "no errors, no request lost": errors == 0,
    }
    print("targets: " + "; ".join(f"{k}: {'met' if ok else 'NOT met'}" for k, ok in checks.items()))
    summary = {"e_over_s": round(ratio, 3), "adapters_mb": round(adapters, 2), "errors": errors}
    summary |= {
        f"{when}_rss_mb": {m: [round(x) for x in v] for m, v in found.items()}
        for when, found in (("loaded", loaded), ("peak", each))
    }
    print(json.dumps({m: round(r["responses_per_s"], 2) for m, r in rows.items()} | summary))  # fmt: skip


def memory(peaks: dict[str, list[float]], adapters: float, when: str) -> bool:
    """Print (e)'s peak RSS `when` against one (s) server's (the interpreter, torch and one merged model: a base)
    plus the three adapters plus 10%; whether it is within."""
    base = statistics.fmean(peaks[SEPARATE])
    bound = (base + adapters) * 1.10
    print(
        f"peak RSS {when}: (e) {peaks[ENSEMBLE][0]:.0f} MB; one (s) server {base:.0f} MB (mean of three) + 3 "
        f"adapters {adapters:.1f} MB + 10% = {bound:.0f} MB; (s) all three {sum(peaks[SEPARATE]):.0f} MB"
    )
    return peaks[ENSEMBLE][0] <= bound


# --- --verl: verl's per-sample reward calls, one /score each or through rm.client.verl_rewards -----------------

VERL_MODES = {"per-sample": "(p) one /score call per sample", "verl-adapter": "(v) rm.client.verl_rewards"}
"""With --verl: a verl step's reward calls, 8 rollout groups of 8 at once, as verl's reward loop makes them (one call
per finished sample, in any order): (p) each call posts its own text to /score, as a compute_score written without
the adapter does; (v) each call is the adapter's compute_score, which sends a group as one /score_groups group once
its 8 samples have come."""


async def verl_round(url: str, mode: str, groups: list[dict], client, rng: random.Random) -> list[float]:
    """One step's reward calls for `groups` (8 x 8 samples, shuffled), all at once; their rewards in sample order."""
    from rm.client.verl_rewards import compute_score

    samples = [(g["prompt"], c) for g in groups for c in g["completions"]]
    order = rng.sample(range(len(samples)), len(samples))

    async def call(k: int) -> float:
        prompt, completion = samples[k]
        if mode == "per-sample":
            return (await client.score([prompt + completion]))[0]
        extra = {"raw_prompt": prompt}
        return await compute_score("hh", completion, None, extra, url=url, n=GROUP, max_wait_s=30.0)

    got = await asyncio.gather(*(call(k) for k in order))
    out = [0.0] * len(samples)
    for k, reward in zip(order, got, strict=True):
        out[k] = reward
    return out


def verl_counters(url: str) -> dict[str, float]:
    """/info's counters (`prompt_tokens` where the server reports it, else None)."""
    import httpx

    info = httpx.get(url + "/info", timeout=30).json()
    return {k: info.get(k) for k in ("scored", "tokens", "prompt_tokens", "groups", "busy_seconds")}


def verl_turn(url: str, mode: str, requests: list[dict], seconds: float, seed: int) -> dict:
    """Steps of 8 groups back to back for `seconds` (after one unmeasured step): responses/s, and per response the
    tokens and prompt tokens the server computed."""
    from rm.client import AsyncRewardClient

    rng = random.Random(seed)

    async def steps() -> tuple[int, float, dict]:
        async with AsyncRewardClient(url, timeout=600) as client:
            await verl_round(url, mode, rng.sample(requests, 8), client, rng)
            before = verl_counters(url)
            started, done = time.monotonic(), 0
            while time.monotonic() - started < seconds:
                done += len(await verl_round(url, mode, rng.sample(requests, 8), client, rng))
            return done, time.monotonic() - started, before

    done, elapsed, before = asyncio.run(steps())
    after = verl_counters(url)
    scored = max(1.0, after["scored"] - before["scored"])
    per = {"tokens_per_response": (after["tokens"] - before["tokens"]) / scored}
    if after["prompt_tokens"] is not None:
        per["prompt_tokens_per_response"] = (after["prompt_tokens"] - before["prompt_tokens"]) / scored
        per["groups_per_step"] = (after["groups"] - before["groups"]) / (scored / (8 * GROUP))
    return {"responses_per_s": done / elapsed, **per}


def conduct_verl(args: argparse.Namespace) -> None:
    folder = args.work / f"{args.size}-seed{args.seed}"
    folder.mkdir(parents=True, exist_ok=True)
    requests = prepare(args.data, folder, args.size, args.seed)["requests"]
    ratio, flat, group = ceiling(requests)
    export = folder.resolve() / "export"
    servers = start_servers(export, args.work, args.threads, args.server_args.split(), ["rm-groups"])
    proc, url = servers["rm-groups"]
    try:
        check = random.Random(args.seed)
        from rm.client import AsyncRewardClient

        async def both() -> float:
            async with AsyncRewardClient(url) as client:
                groups = requests[:8]
                a = await verl_round(url, "per-sample", groups, client, check)
                b = await verl_round(url, "verl-adapter", groups, client, check)
            return max(abs(x - y) for x, y in zip(a, b, strict=True))

        print(f"server up; largest reward difference (p) vs (v) on one step: {asyncio.run(both()):.2e}", flush=True)
        results: dict[str, list[dict]] = {m: [] for m in VERL_MODES}
        for turn in range(args.turns):
            for mode in VERL_MODES:
                r = verl_turn(url, mode, requests, args.seconds, args.seed + turn)
                results[mode].append(r)
                print(f"  turn {turn + 1} {mode}: {r['responses_per_s']:.1f} responses/s, {r}", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    print(json.dumps(verl_report(results, ratio)))


def verl_report(results: dict[str, list[dict]], ratio: float) -> dict:
    rows = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in results.items()}
    p, v = rows["per-sample"], rows["verl-adapter"]
    speedup = v["responses_per_s"] / p["responses_per_s"]
    computed = p["tokens_per_response"] / v["tokens_per_response"]
    print(f"\n{'mode':<34} {'responses/s':>12} {'tokens/resp':>12} {'prompt tok/resp':>16}")
    for mode, row in rows.items():
        prompt, speed = row.get("prompt_tokens_per_response", float("nan")), row["responses_per_s"]
        print(f"{VERL_MODES[mode]:<34} {speed:>12.1f} {row['tokens_per_response']:>12.1f} {prompt:>16.1f}")
    print(
        f"(v)/(p): {speedup:.3f}x responses/s (medians over {len(results['per-sample'])} interleaved turns); tokens "
        f"computed per response (p)/(v) {computed:.3f}x (the ceiling of what (v) saves; a prompt computed for every "
        f"text would make it {ratio:.3f}x)"
    )
    return {"verl": rows, "speedup": speedup, "tokens_ratio": computed, "nominal_ceiling": ratio}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "bench_serve")
    ap.add_argument("--size", choices=("small", "medium"), default="small")
    ap.add_argument("--clients", type=int, default=32, help="concurrent clients (one load process)")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured seconds per turn")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of load before each turn's measurement")
    ap.add_argument("--turns", type=int, default=3, help="rounds of A B C")
    ap.add_argument("--max-requests", type=int, default=100_000, help="requests one load process sends at most")
    ap.add_argument("--request-timeout", type=float, default=120.0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads per server (0: every usable core)")
    ap.add_argument("--server-args", default="", help="more `rm serve` flags, e.g. '--max-batch-tokens 32768'")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--layouts",
        action="store_true",
        help="also (b'): /score_groups on a server with --no-prefix-cache, interleaved",
    )
    ap.add_argument(
        "--against",
        type=Path,
        help="another checkout of rm (e.g. `git worktree add /tmp/before HEAD~1`): (a) and (b) on its rm too, "
        "interleaved with the others",
    )
    ap.add_argument(
        "--ensemble",
        action="store_true",
        help="instead of (a) (b) (c): three LoRA members as one `rm serve --ensemble` (e) against three servers (s)",
    )
    ap.add_argument(
        "--split-threads",
        action="store_true",
        help="with --ensemble: the three (s) servers share --threads (a third each) instead of taking them each",
    )
    ap.add_argument(
        "--verl",
        action="store_true",
        help="instead of (a) (b) (c): verl's per-sample reward calls, 8 groups of 8, one /score each (p) or through "
        "rm.client.verl_rewards (v)",
    )
    ap.add_argument("--baseline-server", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--load", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--pool", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.against is not None:
        args.against = args.against.resolve()
        if not (args.against / "rm" / "__main__.py").is_file():
            ap.error(f"--against {args.against}: not a checkout of rm (no rm/__main__.py there)")
    args.threads = args.threads or len(os.sched_getaffinity(0))
    if args.baseline_server:
        baseline_server(args.baseline_server, args.threads)
    elif args.load:
        requests = json.loads(args.pool.read_text())["requests"]
        result = asyncio.run(
            load(
                args.load,
                args.mode,
                requests,
                args.clients,
                args.seconds,
                args.warmup,
                args.max_requests,
                args.seed,
                args.request_timeout,
            )
        )
        print(json.dumps(result))
    else:
        args.work.mkdir(parents=True, exist_ok=True)
        conduct_verl(args) if args.verl else conduct_ensemble(args) if args.ensemble else conduct(args)


if __name__ == "__main__":
    main()
