"""Running the server: one process, or `--workers N` processes on one port, each holding the model.

One worker serves in this process (uvicorn's Server on a socket bound here, so a port in use is one `error:`
line and `--port 0` prints the port it got). N workers are spawned processes, each loading the model on its
device (with `--device cuda`, worker i takes GPU i; threads: the usable cores shared among them) and listening on
the same port with SO_REUSEPORT, so the kernel spreads connections over them. Each child gets the settings as
JSON in its arguments and the API key in its environment (RM_API_KEY), never on a command line.

SIGTERM (or Ctrl-C) stops accepting, lets every request in flight finish (uvicorn's graceful shutdown, then the
model thread scores what is queued) for up to --drain-seconds (what is still unanswered then gets a 503 and one
log line), and exits 0. A server whose model or preparation thread died exits 1 (its /health said 503 first).
The supervisor passes the signal on to its workers and exits 0 once all of them have, 1 if one failed.

Each process that holds a model gives a batch's freed memory back to the system (`return_large_frees`,
`give_back_freed`).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
from multiprocessing.connection import wait
from typing import Any

from rm.errors import ConfigError, RMError
from rm.serve.serve_config import KEY_ENV, ServeConfig

log = logging.getLogger("rm.serve")


def serve(cfg: ServeConfig, key: str | None, announce: Any = print) -> int:
    """Serve until SIGTERM or Ctrl-C; 0 after a clean drain. Loading errors raise (one `error:` line)."""
    setup_logging()
    if cfg.workers == 1:
        port = free_port(cfg)  # a busy port is refused before minutes of loading
        scorer = load(cfg, 0)
        sock = bind(cfg.host, port, reuse_port=False)
        announce(started(cfg, sock.getsockname()[1], scorer))
        return run(cfg, scorer, key, 0, sock)
    return supervise(cfg, key, announce)


def setup_logging() -> None:
    """The server's own lines on stderr, formatted as uvicorn's, unless the program (a test) has its handlers."""
    logger = logging.getLogger("rm.serve")
    logger.setLevel(logging.INFO)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)


def started(cfg: ServeConfig, port: int, scorer: Any = None) -> str:
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    line = f"rm serve: {cfg.name} on http://{host}:{port}"
    if scorer is not None:
        line += f" (layout {scorer.layout_name}, max_length {scorer.max_length}, device {scorer.device})"
    return line + (f", {cfg.workers} workers" if cfg.workers > 1 else "") + "; SIGTERM or Ctrl-C stops it"


def worker_device(device: str, index: int) -> str:
    """The device of worker `index`: with cuda (or auto on a GPU machine) worker i takes GPU i (modulo GPUs)."""
    if device not in ("cuda", "auto"):
        return device
    import torch

    if not torch.cuda.is_available():
        if device == "cuda":
            raise ConfigError("--device cuda: torch sees no CUDA GPU here (use --device cpu)")
        return "cpu"
    return f"cuda:{index % torch.cuda.device_count()}"


MMAP_THRESHOLD = 64 << 20
"""Bytes from which glibc serves an allocation with a mapping of its own, given back to the system when freed."""


def return_large_frees() -> bool:
    """Blocks of MMAP_THRESHOLD bytes or more (a long batch's attention scores) are mapped on their own and given
    back when freed, and smaller ones come from the heap, whose free pages `give_back_freed` returns after each
    batch; True where that was set. glibc's default threshold rises to the largest block freed so far (up to 32 MiB),
    after which such blocks stay in a heap that keeps what it once held: a server's batches vary in size, and its
    memory stayed at its largest batch's plus the heap's fragments. A threshold as low as 1 MiB gives every freed
    block back at once but maps and faults in every large tensor anew: on the CPU, a forward took 1.3-1.6x as long
    (scripts/bench_serve.py --ensemble's models, one batch of 12,842 tokens; `MALLOC_MMAP_THRESHOLD_=1048576 python
    scripts/bench_batch_threads.py` runs that batch under it). Linux with glibc only; a MALLOC_MMAP_THRESHOLD_ of
    the user's is kept."""
    if LIBC is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def give_back_freed() -> None:
    """The heap's free pages back to the system (glibc's malloc_trim), after each batch: the next batch faults in
    what it uses, a few hundredths of a second beside a forward of seconds on the CPU."""
    if LIBC is not None:
        LIBC.malloc_trim(0)


def glibc() -> ctypes.CDLL | None:
    """glibc, where this process runs on it (Linux); None elsewhere or on another C library."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


LIBC = glibc()
M_MMAP_THRESHOLD = -3
"""mallopt's parameter number for the threshold (glibc's malloc.h)."""


def load(cfg: ServeConfig, index: int):
    """The model of worker `index`, on its device, with its share of the CPU threads."""
    return_large_frees()
    from rm.model.threads import usable_cores
    from rm.serve.scorer import load_ensemble_scorer, load_scorer

    threads = cfg.num_threads or max(1, usable_cores() // cfg.workers)
    common = {"device": worker_device(cfg.device, index), "dtype": cfg.dtype, "max_length": cfg.max_length,
              "trust_remote_code": cfg.trust_remote_code, "normalize": cfg.normalize, "num_threads": threads,
              "prefix_cache": cfg.prefix_cache}  # fmt: skip
    if cfg.ensemble:
        return load_ensemble_scorer(cfg.members, k=cfg.uncertainty_k, reward=cfg.ensemble_reward, **common)
    return load_scorer(cfg.model, **common)


def bind(host: str, port: int, reuse_port: bool) -> socket.socket:
    """A listening TCP socket on (host, port); an address in use or not ours is one line naming it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def free_port(cfg: ServeConfig) -> int:
    """--port, checked free by binding it once (--port 0: the free port the system picks)."""
    probe = bind(cfg.host, cfg.port, reuse_port=False)
    port = probe.getsockname()[1]
    probe.close()
    return port


KEEP_ALIVE_SECONDS = 20
"""How long an idle connection is kept for its client's next request: longer than clients keep one in their pools
(httpx 5 s, aiohttp 15 s), so that the client drops it first. At uvicorn's 5 s, a client that reused a 5-second-old
connection as the server closed it got a read error (measured: one request in 400 of scripts/bench_serve.py
--ensemble's three-server load, whose connections idle while the slowest server answers)."""


def run(cfg: ServeConfig, scorer: Any, key: str | None, index: int, sock: socket.socket) -> int:
    """Serve the app on `sock` until a signal, then drain: 0; 1 when a thread the server needs died. uvicorn
    restores the signal handlers it found and raises the signal again after its shutdown: handlers that do nothing
    are left for it, so a drained stop returns (and the ones found before are back afterwards)."""
    import uvicorn

    from rm.serve.app import build_app
    from rm.serve.connections import connection_cap, guarded_protocol

    servers: list[uvicorn.Server] = []

    def stop() -> None:  # from the dying thread: uvicorn's main loop sees the flag within 0.1 s
        servers[0].should_exit = True

    app = build_app(scorer, cfg, key if cfg.auth else None, index, on_fatal=stop, after_batch=give_back_freed)
    config = uvicorn.Config(
        app,
        http=guarded_protocol(connection_cap(cfg.max_connections), cfg.read_timeout),
        lifespan="on",
        access_log=cfg.access_log,
        server_header=False,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=cfg.drain_seconds,  # type: ignore[arg-type] - asyncio.timeout takes a float
        log_level="info",
    )
    servers.append(uvicorn.Server(config))
    found = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        servers[0].run(sockets=[sock])
    finally:
        for sig, handler in found.items():
            signal.signal(sig, handler)
    if app.state.batcher.died is not None or app.state.preparer.died is not None:
        log.error("rm serve stopped: a thread it needs died (the traceback is above); exit code 1")
        return 1
    return 0


def worker_main(settings: str, index: int, port: int, conn: Any) -> None:
    """A spawned worker: load, bind the shared port, tell the supervisor, serve."""
    setup_logging()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor passes a Ctrl-C on as SIGTERM, once
    cfg = ServeConfig.from_json(settings)
    try:
        scorer = load(cfg, index)
        sock = bind(cfg.host, port, reuse_port=True)
    except RMError as e:
        conn.send(("error", str(e)))
        sys.exit(2)
    conn.send(("ready", str(scorer.device)))
    sys.exit(run(cfg, scorer, os.environ.get(KEY_ENV), index, sock))


def supervise(cfg: ServeConfig, key: str | None, announce: Any) -> int:
    """Start the workers, wait until each has loaded the model (or one could not), then until they stop."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("--workers above 1 needs SO_REUSEPORT (Linux, BSD, macOS); run one worker per port")
    port = free_port(cfg)
    if key is not None and cfg.auth:
        os.environ[KEY_ENV] = key  # the children's environment: never their command lines
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each: no forked torch or CUDA state
    workers = []
    for i in range(cfg.workers):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=worker_main, args=(cfg.to_json(), i, port, send), name=f"rm-serve-{i}")
        proc.start()
        workers.append((proc, receive))
    stopping: list[int] = []

    def stop(sig: int, _frame: Any) -> None:
        stopping.append(sig)
        for proc, _ in workers:
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for i, (proc, receive) in enumerate(workers):
        while not receive.poll(0.2) and proc.is_alive() and not stopping:
            pass
        if stopping:  # a signal before every worker served: nothing in flight to drain
            break
        message = receive.recv() if receive.poll() else ("error", f"worker {i} ended while loading the model")
        if message[0] == "error":
            stop(signal.SIGTERM, None)
            for p, _ in workers:
                p.join()
            raise RMError(message[1])
    serving = not stopping
    if serving:
        announce(started(cfg, port))
    alive = {proc.sentinel: proc for proc, _ in workers}
    while alive:
        for sentinel in wait(list(alive)):
            proc = alive.pop(sentinel)
            proc.join()
            if proc.exitcode != 0 and not stopping:
                log.error("worker %s ended with exit code %s; stopping the others", proc.name, proc.exitcode)
                stop(signal.SIGTERM, None)
    return 0 if not serving or all(p.exitcode == 0 for p, _ in workers) else 1
