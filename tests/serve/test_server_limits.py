"""The server's own limits: every option's range checked before loading (one line each); a dead model thread
fails /health and every waiting request and ends the server with exit code 1; a capped number of connections,
each given --read-timeout to send its request head. Deadlines here only guard hangs."""

import asyncio
import json
import socket
import threading
import time

import pytest
import uvicorn
from serving import asgi_post, client, scorer_for

import rm.serve.launch
from rm.cli import main as cli
from rm.serve.launch import bind
from rm.serve.serve_config import ServeConfig

DEADLINE = 60  # seconds: only a hang ever waits this long
GOOD = "\n\nHuman: What is 2 plus 3?\n\nAssistant: It is 5."


@pytest.fixture(scope="module")
def scorer(exported_tiny):
    return scorer_for(str(exported_tiny))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-wait-ms", "inf"], "--max-wait-ms must be a number from 0 to 60000, got inf"),
        (["--max-wait-ms", "nan"], "--max-wait-ms must be a number from 0 to 60000, got nan"),
        (["--max-wait-ms", "-1"], "--max-wait-ms must be a number from 0 to 60000, got -1.0"),
        (["--read-timeout", "0"], "--read-timeout must be a number from 0.001 to 3600, got 0.0"),
        (["--drain-seconds", "1e9"], "--drain-seconds must be a number from 0 to 3600, got 1000000000.0"),
        (["--max-connections", "0"], "--max-connections must be at least 1, got 0"),
        (["--max-length", "-5"], "--max-length, --num-threads and --batch-threads cannot be negative"),
        (["--batch-threads", "-1"], "--max-length, --num-threads and --batch-threads cannot be negative"),
        (["--allow-host", "http://x/"], "--allow-host takes a host name (or *), got 'http://x/'"),
    ],
)
def test_each_option_out_of_range_is_one_line_before_loading(flags, message, capsys, tmp_path):
    assert cli(["serve", str(tmp_path / "not-loaded"), *flags]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_a_dead_model_thread_fails_health_and_every_request(scorer):
    """An unchecked --max-wait-ms inf kills the model thread on the first request (queue.get's timeout overflows):
    that request and every later one get a 503 naming why, and /health stops saying ok."""
    with client(scorer, max_wait_ms=float("inf")) as c:
        first, later = (
            asyncio.run(asyncio.wait_for(asgi_post(c.app, "/score", b'{"texts": ["hi"]}'), DEADLINE)) for _ in "12"
        )
        health = c.get("/health")
    status, body = first
    assert status == 503 and body["error"].startswith("the server is stopping: its model thread died (OverflowError")
    assert later[0] == 503 and later[1]["error"] == body["error"]
    assert health.status_code == 503 and health.json()["error"] == body["error"]


def test_the_server_ends_with_exit_code_1_when_its_model_thread_dies(scorer, monkeypatch):
    """launch.run in this process on a free port: the first request kills the model thread, the server stops by
    itself and run returns 1. (Should it not stop, the request thread stops it after the deadline.)"""
    servers: list[uvicorn.Server] = []

    class Recorded(uvicorn.Server):
        def __init__(self, config):
            super().__init__(config)
            servers.append(self)

    monkeypatch.setattr(uvicorn, "Server", Recorded)
    cfg = ServeConfig(model=scorer.name, max_wait_ms=float("inf"))
    sock = bind("127.0.0.1", 0, reuse_port=False)
    port = sock.getsockname()[1]
    replies: list[tuple[int, dict]] = []
    returned = threading.Event()

    def request() -> None:
        import httpx

        until(lambda: servers and servers[0].started)
        try:
            got = httpx.post(f"http://127.0.0.1:{port}/score", json={"texts": [GOOD]}, timeout=DEADLINE)
            replies.append((got.status_code, got.json()))
        except httpx.HTTPError as e:  # no answer: the request hung on the dead thread
            replies.append((0, {"error": str(e)}))
        if not returned.wait(DEADLINE):
            servers[0].should_exit = servers[0].force_exit = True  # no drain: its request waits for ever

    thread = threading.Thread(target=request)
    thread.start()
    try:
        code = rm.serve.launch.run(cfg, scorer, None, 0, sock)
    finally:
        returned.set()
        thread.join()
    assert code == 1
    assert replies[0][0] == 503 and "model thread died" in replies[0][1]["error"]


def until(condition) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


async def hello(scope, receive, send) -> None:
    """The smallest ASGI app: 200 "ok" to any request."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def uvicorn_in_thread(max_connections: int, read_timeout: float):
    """uvicorn with rm's connection guards on a free loopback port, serving `hello` from a thread of this process."""
    from rm.serve.connections import guarded_protocol

    config = uvicorn.Config(hello, http=guarded_protocol(max_connections, read_timeout), lifespan="off")
    server = uvicorn.Server(config)
    sock = bind("127.0.0.1", 0, reuse_port=False)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    until(lambda: server.started)
    return server, thread, sock.getsockname()[1]


def read_all(conn: socket.socket) -> bytes:
    conn.settimeout(DEADLINE)
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    conn.close()
    return b"".join(chunks)


def error_of(reply: bytes) -> tuple[int, str]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


@pytest.mark.slow
def test_connections_past_the_cap_are_refused_and_silent_ones_closed():
    """Two connections open (the cap): a third is answered 503 at once. A connection that sends nothing, or only
    part of its next request head after an answer (a slow-loris client), is answered 408 and closed after the
    read timeout, so none holds a file descriptor or the drain for ever."""
    server, thread, port = uvicorn_in_thread(max_connections=2, read_timeout=0.5)
    try:
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        refused = error_of(read_all(socket.create_connection(("127.0.0.1", port))))
        assert refused == (503, "too many connections (this server's --max-connections 2)")
        silent = [error_of(read_all(conn)) for conn in held]  # they sent nothing: closed after 0.5 s
        assert silent == [(408, "no request arrived within this server's --read-timeout 0.5 s")] * 2
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        slow.settimeout(DEADLINE)
        first = b""
        while not first.endswith(b"ok"):
            first += slow.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")  # answered, and kept alive
        slow.sendall(b"GET / HTTP/1.1\r\nHo")  # ...then a head that never ends
        assert error_of(read_all(slow))[0] == 408
    finally:
        server.should_exit = True
        thread.join(DEADLINE)


def test_the_connection_cap_fits_the_open_file_limit(monkeypatch, caplog):
    """With `ulimit -n 64` (soft and hard) and 40 descriptors open, 512 connections cannot all have one: the cap
    becomes 64 - 40 - 16 spare = 8, with a warning; a limit with room leaves it as asked."""
    import resource

    from rm.serve import connections

    limits = {"now": (64, 64)}

    def setrlimit(which, value):
        if value[0] > limits["now"][1]:
            raise ValueError("not allowed to raise the soft limit past the hard one")
        limits["now"] = value

    monkeypatch.setattr(resource, "getrlimit", lambda which: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    monkeypatch.setattr(connections, "open_files", lambda: 40)
    with caplog.at_level("WARNING", logger="rm.serve"):
        assert connections.connection_cap(512) == 8
    assert "--max-connections 512 lowered to 8: the open-file limit is 64 (ulimit -n)" in caplog.text
    limits["now"] = (64, 4096)  # the soft limit can be raised toward the hard one: it is, and the cap holds
    assert connections.connection_cap(512) == 512 and limits["now"] == (568, 4096)


def test_batch_threads_default_to_two_parts_on_the_cpu_and_one_on_a_gpu():
    from types import SimpleNamespace

    import torch

    from rm.serve.scorer import Scorer

    def parts(asked: int, device: str, concurrent: bool = True) -> int:
        return Scorer.batch_threads(SimpleNamespace(concurrent=concurrent, device=torch.device(device)), asked)

    assert (parts(0, "cpu"), parts(0, "cuda"), parts(3, "cpu"), parts(3, "cuda")) == (2, 1, 3, 3)
    assert parts(0, "cpu", concurrent=False) == parts(3, "cpu", concurrent=False) == 1  # adapters switched globally
