"""A live `python -m rm serve` for the client tests, and the rewards `rm score` gives the same texts.

The client is tested against the real server process (not an in-process app): what it must get right is the
HTTP between them. The references are `rm score`'s own function (rm.evaluation.score_file) on records written
to a file, so the server, the client and the reference share no code path but the model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def rm_serve(model: Path, log: Path, *args: str, timeout: float = 150) -> Iterator[str]:
    """`python -m rm serve MODEL --port 0 ARGS`, yielding its URL once /health answers; SIGTERM at the end (its
    whole process group killed if it has not stopped 20 s later). Output goes to `log`, shown on failure."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rm", "serve", str(model), "--port", "0", "--num-threads", "1", *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        yield _wait_healthy(proc, log, timeout)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_healthy(proc: subprocess.Popen, log: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"rm serve ended (rc {proc.returncode}):\n{log.read_text()[-3000:]}"
        found = re.search(r"on (http://[\w.]+:\d+)", log.read_text(errors="replace"))
        if found:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(found.group(1) + "/health", timeout=2).status_code == 200:
                    return found.group(1)
        time.sleep(0.2)
    raise AssertionError(f"rm serve did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


def rm_score(model, tokenizer, records: list[dict], folder: Path) -> list[dict]:
    """`rm score`'s output records for `records` (score_file, the function behind the command)."""
    from rm.evaluation.score_file import score_file

    src, out = folder / f"in-{time.monotonic_ns()}.jsonl", folder / f"out-{time.monotonic_ns()}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    score_file(model, tokenizer, src, out, batch_size=8, progress=False)
    return [json.loads(line) for line in out.read_text().splitlines()]
