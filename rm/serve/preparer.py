"""The one preparation thread of a server process, shared fairly: requests take turns a bounded step at a time.

A request's preparation (JSON, chat templates, tokenizing: rm/serve/bodies.py `preparing`) is a generator of
steps of at most STEP_ITEMS items. The thread runs one step of the request at the head of the line and sends it
to the back, so a one-text request that arrives behind a 7 MB one waits for one step of it (milliseconds), not
for the whole of it (seconds). One thread keeps the tokenizer to one caller at a time. A request whose client
has gone (its coroutine cancelled) loses its turn before its next step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("rm.serve")


class PreparerStopped(Exception):
    """The preparation thread has died: no request can be prepared any more."""


@dataclass
class Turn:
    """One request in line: its remaining steps, and how its result reaches the event loop that waits for it."""

    steps: Generator[None, None, Any]
    deliver: Callable[[Any, BaseException | None], None]
    cancelled: bool = False


class Preparer:
    """Requests' preparation steps, round-robin, on one thread."""

    def __init__(self, on_fatal: Callable[[BaseException], None] | None = None):
        self.line: deque[Turn] = deque()
        self.cond = threading.Condition()
        self.stopping = False
        self.died: BaseException | None = None
        """What ended the thread (a bug), or None while it runs."""
        self.on_fatal = on_fatal
        self.thread = threading.Thread(target=self._run, name="rm-serve-prepare", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """End the thread once the line is empty (the server's shutdown, after its last request)."""
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.thread.join()

    def waiting(self) -> int:
        """Requests in line for their next step (tests read it to know a request has arrived)."""
        with self.cond:
            return len(self.line)

    async def run(self, steps: Generator[None, None, Any]) -> Any:
        """What `steps` returns once the thread has run them all, in turns with the other requests."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def settle(value: Any, error: BaseException | None) -> None:
            if not future.done():
                future.set_exception(error) if error is not None else future.set_result(value)

        def deliver(value: Any, error: BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(settle, value, error)
            except RuntimeError:  # the loop has closed (a forced stop): nobody waits for this answer
                pass

        turn = Turn(steps, deliver)
        with self.cond:
            if self.died is not None:
                raise PreparerStopped(str(self.died))
            self.line.append(turn)
            self.cond.notify()
        try:
            return await future
        except asyncio.CancelledError:  # the client went away: its remaining steps are skipped
            turn.cancelled = True
            raise

    def _run(self) -> None:
        turn = None
        try:
            while (turn := self._next()) is not None:
                self._step(turn)
        except BaseException as e:  # noqa: BLE001 - a dead thread must fail its waiters and stop the server
            with self.cond:
                self.died = e
                waiting, self.line = [*([turn] if turn else []), *self.line], deque()
            log.critical("the preparation thread stopped: %s: %s", type(e).__name__, e, exc_info=True)
            for turn in waiting:
                turn.deliver(None, PreparerStopped(str(e)))
            if self.on_fatal is not None:
                self.on_fatal(e)

    def _next(self) -> Turn | None:
        with self.cond:
            while not self.line and not self.stopping:
                self.cond.wait()
            return self.line.popleft() if self.line else None

    def _step(self, turn: Turn) -> None:
        """One step of `turn`; back in line unless it finished, failed, or its client has gone."""
        if turn.cancelled:
            turn.steps.close()
            return
        try:
            next(turn.steps)
        except StopIteration as done:
            turn.deliver(done.value, None)
            return
        except Exception as e:  # noqa: BLE001 - a refused request (RequestError) or a bug: that request's answer
            turn.deliver(None, e)
            return
        with self.cond:
            self.line.append(turn)
