"""Real server processes (`python -m rm serve` on a free localhost port, bounded in requests and time, killed at
the end if still running): a key on a non-loopback bind, SIGTERM draining requests in flight to exit 0 (and giving
up on a stuck one after --drain-seconds, in one line), two CPU workers on one port answering alike, and the curl
commands of docs/serving.md run as written."""

import json
import re
import shlex
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from serving import scorer_for, start_server, text_reference

from conftest import REPO

pytestmark = pytest.mark.slow
KEY = "live-key-never-in-any-log"
TEXTS = [f"\n\nHuman: What is {i} plus {i}?\n\nAssistant: It is {2 * i}." for i in range(8)]


@pytest.fixture(scope="module")
def scorer(exported_tiny):
    return scorer_for(str(exported_tiny))


@pytest.fixture(scope="module")
def servers(exported_tiny, tmp_path_factory):
    """Both servers of this module, started together so that they load their models at once (each test waits for
    its own); killed at the end if a test left one running."""
    tmp = tmp_path_factory.mktemp("live")
    keyed = ["--host", "0.0.0.0", "--max-wait-ms", "1000", "--access-log", "--device", "cpu", "--num-threads", "1"]
    started = {
        "keyed": start_server(exported_tiny, tmp, *keyed, env={"RM_API_KEY": KEY}),
        "workers": start_server(exported_tiny, tmp, "--workers", "2", "--device", "cpu"),
        "drain": start_server(exported_tiny, tmp, "--drain-seconds", "1", "--device", "cpu", "--num-threads", "1"),
    }
    yield started
    for server in started.values():
        server.kill()


def send_raw(url: str, path: str, body: dict, key: str) -> socket.socket:
    """A POST written whole to the server before returning (so it is in flight, not about to be sent)."""
    parts = urlsplit(url)
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
    sock.sendall(head.encode() + data)
    return sock


def read_raw(sock: socket.socket) -> tuple[int, dict]:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_keyed_server_on_all_interfaces_drains_in_flight_requests_on_sigterm(servers, scorer):
    """Bound to 0.0.0.0 with RM_API_KEY: 401 without the key, /health open. Eight requests written whole into a
    one-second batching window, then SIGTERM: every one is answered with its reward, the process exits 0, and the
    key appears in none of its output (access log on)."""
    server = servers["keyed"].wait()
    assert "0.0.0.0" in server.output()  # it did bind all interfaces
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert httpx.post(f"{server.url}/score", json={"texts": ["hi"]}).status_code == 401
    sockets = [send_raw(server.url, "/score", {"texts": [t]}, KEY) for t in TEXTS]
    with ThreadPoolExecutor(len(sockets)) as pool:
        answers = pool.map(read_raw, sockets)
        wait_until_read(sockets)
        server.proc.send_signal(signal.SIGTERM)
        answers = list(answers)
    assert server.proc.wait(timeout=60) == 0
    output = server.output()
    assert [status for status, _ in answers] == [200] * len(TEXTS)
    expected = [text_reference(scorer, t)[0] for t in TEXTS]
    assert [body["rewards"][0] for _, body in answers] == pytest.approx(expected, abs=1e-5)
    assert "Shutting down" in output and "POST /score" in output  # the access log ran, and the key is in no line
    assert KEY not in output


def wait_until_read(clients: list[socket.socket]) -> None:
    """Until the server has accepted each client's connection and read every byte written to it, so a SIGTERM
    finds them in flight, however loaded the machine: from /proc/net/tcp, where the server's end of a connection
    shows the bytes it has not read yet (rx_queue) and its listening socket the connections not yet accepted.
    (A fixed sleep here had the server still accepting under load; the 60 s only guards a hang.)"""
    import time

    port = clients[0].getpeername()[1]
    ends = {f"{a.getsockname()[1]:04X}" for a in clients}  # the clients' ports, as /proc/net/tcp writes them
    deadline = time.monotonic() + 60
    while True:
        unread, backlog, seen = 0, 0, set()
        for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            local, remote, state, queues = row.split()[1:5]
            if int(local.split(":")[1], 16) != port:
                continue
            rx = int(queues.split(":")[1], 16)
            if state == "0A":  # LISTEN: rx_queue is its accept backlog
                backlog += rx
            elif (end := remote.split(":")[1]) in ends:
                seen.add(end)
                unread += rx
        if seen == ends and not unread and not backlog:
            return
        assert time.monotonic() < deadline, f"the server left {unread} bytes unread, {backlog} connections unaccepted"
        time.sleep(0.05)


def test_sigterm_gives_up_on_a_stuck_request_after_drain_seconds_in_one_line(servers):
    """A client sends a request head and part of its body, then nothing (within the 60 s read timeout), and another
    connects and sends nothing: SIGTERM stops the server after --drain-seconds 1, the stuck request is answered
    503, and the log says so in a line, with no traceback. (The 60 s wait only guards a hang.)"""
    server = servers["drain"].wait()
    parts = urlsplit(server.url)
    stuck = socket.create_connection((parts.hostname, parts.port), timeout=60)
    head = f"POST /score HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
    stuck.sendall(head.encode() + b"\r\n" + b'{"texts": ["')
    idle = socket.create_connection((parts.hostname, parts.port), timeout=60)
    wait_until_read([stuck, idle])
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 0
    status, body = read_raw(stuck)
    idle.close()
    assert status == 503 and body["error"] == "the server stopped before this request was answered (--drain-seconds 1)"
    output = server.output()
    assert "1 request(s) still in flight when --drain-seconds 1 ran out were answered 503" in output
    assert "Traceback" not in output and "CancelledError" not in output


def test_the_routes_docs_curl_commands_answer_as_they_say(servers, scorer):
    """docs/serving.md's Routes block, run with curl as written (the port swapped for this server's): every command
    answers 200 with the shape its comment gives, and the plain text's reward is the reference's."""
    server = servers["workers"].wait()
    block = re.search(r"## Routes\n\n```bash\n(.*?)```", (REPO / "docs" / "serving.md").read_text(), re.S).group(1)
    words = shlex.split(block.replace("localhost:8000", server.url.removeprefix("http://")), comments=True)
    starts = [i for i, word in enumerate(words) if word == "curl"]
    runs = [words[i:j] for i, j in zip(starts, [*starts[1:], len(words)], strict=True)]
    answers = {}
    for argv in runs:
        done = subprocess.run([*argv, "--max-time", "60", "-w", "\\n%{http_code}"], capture_output=True, text=True)
        body, code = done.stdout.rsplit("\n", 1)
        assert done.returncode == 0 and code == "200", (argv, done.stdout, done.stderr)
        answers.setdefault(argv[2].rsplit("/", 1)[1], []).append(json.loads(body))
    assert [len(a) for a in answers.values()] == [1, 1, 2, 1, 1]  # health, info, score twice, score_groups, get_reward
    assert answers["health"] == [{"status": "ok"}] and "max_length" in answers["info"][0]
    text, chat = answers["score"]
    assert text["truncated"] == [False] and len(chat["rewards"]) == 1
    reference = text_reference(scorer, "\n\nHuman: Hi!\n\nAssistant: Hello, how can I help?")[0]
    assert text["rewards"][0] == pytest.approx(reference, abs=1e-5)
    (group,) = answers["score_groups"][0]["rewards"]
    assert len(group) == 3 and answers["score_groups"][0]["truncated"] == [[False] * 3]
    assert len(answers["get_reward"][0]["rewards"]) == 1


def test_an_idle_connection_outlives_a_client_pool_s_keep_alive(servers):
    """A connection left idle for 6 s (httpx drops its idle ones after 5) still takes the next request: the server
    never closes a connection that a client may be reusing at that moment."""
    server = servers["workers"].wait()
    parts = urlsplit(server.url)
    head = f"GET /health HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        answers = []
        for pause in (0, 6):
            time.sleep(pause)
            sock.sendall(head)
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
                chunk = sock.recv(4096)
                assert chunk, f"the server closed the connection after {pause} s idle"
                reply += chunk
            answers.append(reply.split(b" ", 2)[1])
    assert answers == [b"200", b"200"]


def test_two_cpu_workers_on_one_port_both_answer_with_the_same_rewards(servers, scorer):
    """Fresh connections spread over the workers (SO_REUSEPORT); each answer names its worker. SIGTERM to the
    supervisor stops both, exit 0."""
    server = servers["workers"].wait()
    seen: dict[str, list[tuple[int, float]]] = {}
    for i in range(24):  # a new connection each: the kernel picks a worker per connection
        got = httpx.post(f"{server.url}/score", json={"texts": [TEXTS[i % 2]]}, timeout=60)
        assert got.status_code == 200, got.text
        seen.setdefault(got.headers["x-rm-worker"], []).append((i % 2, got.json()["rewards"][0]))
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 0
    assert sorted(seen) == ["0", "1"]
    expected = [text_reference(scorer, t)[0] for t in TEXTS[:2]]
    for answers in seen.values():
        for k, reward in answers:
            assert reward == pytest.approx(expected[k], abs=1e-5)
