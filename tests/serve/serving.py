"""Helpers the server tests share: one loaded tiny model per process, in-process apps, live server processes, and
the reference rewards (`rm score`'s own functions, one text at a time)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from starlette.testclient import TestClient

from rm.collate.scoring import PaddedLayout
from rm.evaluation.record_texts import ScoreText, texts_of
from rm.evaluation.score_file import encode_texts, score_rewards
from rm.serve.app import build_app
from rm.serve.scorer import Scorer, load_scorer
from rm.serve.serve_config import ServeConfig

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|> {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@functools.cache
def scorer_for(model: str, max_length: int = 0, normalize: bool = False) -> Scorer:
    """The tiny model loaded once per test process (and per max_length), as a server worker loads it."""
    return load_scorer(
        model,
        device="cpu",
        dtype="float32",
        trust_remote_code=False,
        max_length=max_length,
        normalize=normalize,
        num_threads=1,
    )


def padded(scorer: Scorer) -> Scorer:
    """The same model served in the padded layout (what models that cannot share a prompt get)."""
    return dataclasses.replace(scorer, layout=PaddedLayout(scorer.tokenizer.pad_token_id))


@contextlib.contextmanager
def client(scorer: Scorer, key: str | None = None, **settings) -> Iterator[TestClient]:
    """A TestClient on an app around `scorer`; the lifespan (the model and preparation threads) runs while it is
    open. Its requests name the server `localhost`, as a loopback server requires."""
    cfg = ServeConfig(model=scorer.name, **settings)
    with TestClient(build_app(scorer, cfg, key), base_url="http://localhost") as c:
        yield c


async def asgi_post(
    app: Any, path: str, body: bytes, *, more: bool = False, after: Callable[[], Awaitable[None]] | None = None
) -> tuple[int, dict]:
    """(status, JSON) of one POST sent straight to the ASGI app (no HTTP, so the test plays the connection): `body`
    in one message (`more`: the client promises more, which never comes); every later receive() waits for
    `after()` and then says the client has gone (without `after`, until the answer is complete)."""
    sent, answered, status, chunks = False, asyncio.Event(), [0], []

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        await (after() if after is not None else answered.wait())
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status[0] = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                answered.set()

    headers = [(b"host", b"localhost"), (b"content-type", b"application/json")]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("localhost", 80),
    }
    await app(scope, receive, send)
    return status[0], json.loads(b"".join(chunks) or b"{}")


def reference(scorer: Scorer, texts: list[ScoreText]) -> list[tuple[float, bool]]:
    """(reward, truncated) per text of one item, each scored alone in a padded batch of one, through `rm score`'s
    encode_texts and score_rewards: what the server's batching must reproduce."""
    groups = encode_texts(scorer.tokenizer, texts, scorer.max_length, scorer.prefix)
    rewards = score_rewards(scorer.model, groups, PaddedLayout(scorer.tokenizer.pad_token_id), 1, scorer.device)
    truncated = [g.truncated for g in groups for _ in g.response_ids]  # per text
    return list(zip(rewards, truncated, strict=True))


def text_reference(scorer: Scorer, text: str) -> tuple[float, bool]:
    """A whole text as `rm score` reads a {"text": ...} record."""
    return reference(scorer, texts_of({"text": text}, "t"))[0]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Live:
    """A `python -m rm serve` process; `url` is set once /health answers (`wait`)."""

    proc: subprocess.Popen
    log: Path
    url: str = ""

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float = 180) -> Live:
        """Until the printed URL answers /health (the process must not end first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the server ended (rc {self.proc.returncode}):\n{self.output()[-3000:]}"
            found = re.search(r"on (http://\S+:\d+)", self.output())
            if found:
                url = found.group(1).replace("0.0.0.0", "127.0.0.1")  # an all-interfaces bind, reached locally
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        self.url = url
                        return self
            time.sleep(0.1)
        raise AssertionError(f"no server after {timeout} s:\n{self.output()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL to its process group (workers too), if it still runs."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_server(model: str | Path, tmp: Path, *args: str, env: dict | None = None) -> Live:
    """`python -m rm serve MODEL --port 0 ARGS` started in its own process group, output to a file in `tmp`; not
    waited for, so that several servers load their models at once."""
    log = tmp / f"serve-{time.monotonic_ns()}.log"
    environ = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rm", "serve", str(model), "--port", "0", *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environ,
            start_new_session=True,
        )
    return Live(proc, log)


@contextlib.contextmanager
def live_server(
    model: str | Path, tmp: Path, *args: str, env: dict | None = None, timeout: float = 180
) -> Iterator[Live]:
    """A started server, waited for until /health answers, killed when the block ends if it still runs."""
    server = start_server(model, tmp, *args, env=env)
    try:
        yield server.wait(timeout)
    finally:
        server.kill()


def with_chat_template(export: Path, folder: Path) -> Path:
    """A copy of `export` at `folder` whose tokenizer has `TEMPLATE`: conversations are rendered with it."""
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(export, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder
