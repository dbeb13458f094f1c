"""`rm serve`'s application on a loopback port, served by uvicorn from a thread of the test process: the client
talks real HTTP to it, and the test reads the server's own state (`app.state.batcher.counters()`) besides."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

from rm.serve.app import build_app
from rm.serve.launch import bind
from rm.serve.scorer import load_scorer
from rm.serve.serve_config import ServeConfig


@contextlib.contextmanager
def served(model: Path, **settings) -> Iterator[tuple[str, Starlette]]:
    """(URL, app) of `model` served on a free loopback port (CPU, float32, one thread) until the block ends."""
    scorer = load_scorer(
        str(model), device="cpu", dtype="float32", trust_remote_code=False, max_length=0, normalize=False,
        num_threads=1,
    )  # fmt: skip
    app = build_app(scorer, ServeConfig(model=str(model), **settings))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    sock = bind("127.0.0.1", 0, reuse_port=False)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the in-process server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
