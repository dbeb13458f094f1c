"""One big request cannot starve small ones, and requests nobody waits for are not scored: preparation takes
requests in turns a bounded step at a time, and a request whose client has gone is dropped before its batch.
Orders are checked with blocking hooks, never durations; each wait has a generous deadline that only guards a
hang."""

import asyncio
import contextlib
import dataclasses
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from serving import asgi_post, client, scorer_for, text_reference

SMALL = "\n\nHuman: A small question?\n\nAssistant: A small answer."
BIG = [f"\n\nHuman: Big question {i}?\n\nAssistant: Big answer {i}." for i in range(64)]  # 4 steps of 16 items
DEADLINE = 120  # seconds: only a hang ever waits this long (each wait is milliseconds unloaded)


@pytest.fixture(scope="module")
def scorer(exported_tiny):
    return scorer_for(str(exported_tiny))


def until(condition, what: str) -> None:
    """Wait for `condition()` (polled), failing after DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.005)


def test_the_preparation_thread_takes_requests_in_turns():
    """A request that arrives while a long one is prepared gets the next step, not the end of the line."""
    from rm.serve.preparer import Preparer

    order: list[str] = []
    preparer = Preparer()

    def steps(name: str, n: int):
        for i in range(n):
            order.append(f"{name}{i}")
            if name == "big" and i == 1:  # the small request is in line before this step ends
                until(lambda: preparer.waiting() == 1, "the small request in line")
            yield
        return name

    async def main() -> list[str]:
        big = asyncio.ensure_future(preparer.run(steps("big", 6)))
        await asyncio.to_thread(until, lambda: "big1" in order, "the big request's second step")
        finished: list[str] = []
        for done in asyncio.as_completed([big, preparer.run(steps("small", 2))]):
            finished.append(await done)
        return finished

    preparer.start()
    try:
        assert asyncio.run(main()) == ["small", "big"]
    finally:
        preparer.stop()
    assert order[:5] == ["big0", "big1", "small0", "big2", "small1"]


def test_a_small_request_behind_a_big_one_is_answered_first(scorer):
    """A 64-text request is being prepared when a one-text request arrives: the small one is prepared between the
    big one's steps and answered while the big one still waits (its last text is held until then)."""
    served = dataclasses.replace(scorer)  # its own encode, hooked; the cached scorer stays as it was
    big_started, small_back = threading.Event(), threading.Event()
    answered: list[str] = []

    def hooked(texts):
        text = texts[0].prompt + texts[0].response
        if "Big question 0?" in text:
            big_started.set()
        preparer = getattr(app.state, "preparer", None)  # (today's code has no line to wait for)
        if "Big question 2?" in text and preparer is not None:  # the small request arrives while the big one is
            until(lambda: preparer.waiting() == 1, "the small request in line")  # prepared
        if "Big question 63?" in text:  # the big one's last text: once the small one is back (or the deadline)
            small_back.wait(DEADLINE)
        return scorer.encode(texts)

    served.encode = hooked
    with client(served) as c, ThreadPoolExecutor(2) as pool:
        app = c.app

        def post(name: str, texts: list[str]):
            got = c.post("/score", json={"texts": texts})
            answered.append(name)
            if name == "small":
                small_back.set()
            return got

        big = pool.submit(post, "big", BIG)
        assert big_started.wait(DEADLINE)
        small = pool.submit(post, "small", [SMALL])
        big, small = big.result(), small.result()
    assert answered == ["small", "big"]
    assert small.status_code == 200 and big.status_code == 200
    assert small.json()["rewards"] == pytest.approx([text_reference(scorer, SMALL)[0]], abs=1e-5)
    assert big.json()["rewards"][-1] == pytest.approx(text_reference(scorer, BIG[-1])[0], abs=1e-5)


def test_a_request_whose_client_has_gone_is_never_scored(scorer):
    """While the model scores request A, request B (40 texts) is queued and its client disconnects: B's texts are
    dropped before any batch, and C, sent next, is scored right after A. Counted by the texts each forward got."""
    gate, busy = threading.Event(), threading.Event()
    forwarded: list[int] = []

    def blocking(groups):
        forwarded.append(sum(len(g.response_ids) for g in groups))
        if not gate.is_set():
            busy.set()
            assert gate.wait(2 * DEADLINE)  # longer than the wait for B below
        return scorer.forward(groups)

    leave = threading.Event()

    async def client_leaves() -> None:
        await asyncio.to_thread(leave.wait, DEADLINE)

    body = json.dumps({"texts": [f"text {i}" for i in range(40)]}).encode()
    with client(scorer, max_wait_ms=0) as c, ThreadPoolExecutor(2) as pool:
        batcher = c.app.state.batcher
        batcher.forward = blocking
        first = pool.submit(c.post, "/score", json={"texts": [SMALL]})
        assert busy.wait(DEADLINE)
        gone = pool.submit(asyncio.run, asgi_post(c.app, "/score", body, after=client_leaves))
        until(lambda: batcher.queue.qsize() == 1, "request B in the model's queue")
        leave.set()
        with contextlib.suppress(TimeoutError):  # B is dropped at once (without the drop, only once it is scored)
            gone.result(timeout=DEADLINE)
        gate.set()
        assert first.result().status_code == 200
        after = c.post("/score", json={"texts": [SMALL]})
        scored = batcher.scored
    assert forwarded == [1, 1] and scored == 2  # A and C; none of B's 40 texts
    assert after.status_code == 200 and gone.result()[0] == 400  # B's answer, which nobody reads
