"""One model thread that coalesces every queued request into token-budgeted batches, longest first.

Requests arrive already checked and tokenized (rm/serve/bodies.py), so nothing that enters a batch can be a bad
request. When idle, the thread takes the first queued job and waits up to `max_wait_ms` for others (or until
`max_batch_tokens` worth is queued). It then orders the items of everything pending (a text, or one group's
responses) by length, longest first, cuts batches whose padded or packed size stays within the
budget, and scores the first; before each next batch it takes in what arrived meanwhile and cuts again
(continuous batching), so the clients answered by one batch are back in the next while the model keeps busy,
rather than the whole load moving in lockstep rounds. A job passed over twice goes in the next batch whatever
its length: none waits for ever behind longer work. A group's responses stay together in one batch so that its
prompt is computed once (a group too large for the budget is cut into parts, each computing the prompt again).
Each reward is read at its own response's end and sees only its prompt and itself, so no reward depends on its
batch neighbours (tests/serve/ checks against `rm score`'s rewards, 1e-5).

With `threads` above 1 (--batch-threads) a batch's groups are scored in that many parts at once, in order, each
part a forward of its own (on the CPU one forward leaves cores idle that another fills).

A model error (out of memory, a bad kernel) fails the requests that had items in that batch, with their request
ids logged, and the thread goes on with the next batch. A request whose client has gone (its coroutine
cancelled: a disconnect, or the end of SIGTERM's drain) is dropped before its next batch, so nobody's texts are
scored for nobody. Should the thread itself die (a bug), every request waiting fails, later ones are refused at
once, and `on_fatal` tells the server, which stops: no request may wait for ever on a thread that is gone.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

from rm.collate.scoring import responses
from rm.serve.batch_plan import MAX_ROW, Job, Output, Part, cost, cut, parts_of, split
from rm.tokens.store import EncodedGroup

log = logging.getLogger("rm.serve")


class ModelFailed(Exception):
    """The model raised on a batch holding this request; the request gets a 500."""


class ModelStopped(ModelFailed):
    """The model thread has died; the request gets a 503 and the server is stopping."""


class Batcher:
    """The queue and the one thread that runs the model (a GPU or torch's CPU threads serve one forward at a time)."""

    def __init__(
        self,
        forward: Callable[[list[EncodedGroup]], list[Output]],
        shared: bool,
        max_batch_tokens: int,
        max_wait_ms: float,
        max_row: int = MAX_ROW,
        cached: bool = False,
        on_fatal: Callable[[BaseException], None] | None = None,
        threads: int = 1,
        after_batch: Callable[[], None] = lambda: None,
    ):
        self.forward, self.after_batch, self.threads = forward, after_batch, threads
        self.parts = ThreadPoolExecutor(threads - 1, "rm-serve-part") if threads > 1 else None
        """Where a batch's parts after the first are scored while this thread scores the first (`split`)."""
        self.shared = shared
        self.cached = cached
        """The forward scores a group's responses on its prompt's cache: a group is planned by its tokens."""
        self.budget, self.max_row, self.wait = max_batch_tokens, max_row, max_wait_ms / 1000
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="rm-serve-model", daemon=True)
        self.rounds: list[int] = []
        """Jobs taken together in each round (what tests read to see requests coalesce); the last 1000."""
        self.busy = 0.0
        """Seconds the model thread spent in forwards since it started (GET /info's `busy_seconds`)."""
        self.scored = 0
        """Responses scored since the start."""
        self.tokens = 0
        """Tokens computed since the start: in the shared layout a group's prompt once, padding not counted."""
        self.requests = 0
        """Requests queued for the model since the start (a request with no text to score is not)."""
        self.groups = 0
        """Groups received: a /score_groups group, or the texts of one flat request that share a prompt."""
        self.prompt_tokens = 0
        """Prompt tokens run through the model: a group's prompt once per part it is scored in, where the layout
        (shared, or a cached prompt) computes it once for its responses; else once per response."""
        self.on_fatal = on_fatal
        self.died: BaseException | None = None
        """What ended the thread (a bug), or None while it runs."""
        self.lock = threading.Lock()  # a job is queued, or refused, never lost in between
        self.open: dict[int, Job] = {}
        """Jobs queued and not yet answered, by id: what a dying thread must fail."""

    def counters(self) -> dict[str, float | int]:
        """What GET /info reports of the model's work since the start: seconds in forwards, responses scored,
        tokens computed (padding not counted), requests queued, groups received and prompt tokens computed."""
        names = ("scored", "tokens", "requests", "groups", "prompt_tokens")
        return {"busy_seconds": round(self.busy, 3)} | {name: getattr(self, name) for name in names}

    def _prompt_cost(self, group: EncodedGroup) -> int:
        """Prompt tokens the model computes for `group`: once in the shared layout or on its prompt's cache (as
        `Scorer.forward` scores a group of two or more responses where the model allows it), else once per response
        (each response a row after its own copy of the prompt)."""
        n = len(group.response_ids)
        once = self.shared or (self.cached and n > 1 and not group.step_ends)
        return len(group.prompt_ids) * (1 if once else n)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Score what is queued, then end the thread (the server's shutdown, after its last request arrived)."""
        self.queue.put(None)
        self.thread.join()
        if self.parts is not None:
            self.parts.shutdown()

    async def score(self, request_id: str, items: list[list[EncodedGroup]]) -> list[list[Output]]:
        """Raw rewards per item (one per response, group after group), once the model thread has scored every
        response; ModelFailed if it could not."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def done(rewards: list[list[Output]] | None) -> None:
            try:
                loop.call_soon_threadsafe(lambda: future.done() or future.set_result(rewards))
            except RuntimeError:  # the loop has closed (a forced stop): nobody waits for this answer
                pass

        if not any(responses(item) for item in items):
            return [[] for _ in items]
        job = Job(request_id, items, done)
        with self.lock:
            if self.died is not None:
                raise ModelStopped(request_id)
            self.open[id(job)] = job
            self.queue.put(job)
            self.requests += 1
            self.groups += sum(len(item) for item in items)
        try:
            rewards = await future
        except asyncio.CancelledError:  # the client has gone: the thread drops the job before its next batch
            job.dropped = True
            raise
        if rewards is None:
            raise ModelStopped(request_id) if self.died is not None else ModelFailed(request_id)
        return rewards

    def _finish(self, job: Job, rewards: list[list[Output]] | None) -> None:
        self.open.pop(id(job), None)
        if rewards is None:
            job.failed = True
        job.done(rewards)

    def _live(self, jobs: list[Job]) -> list[Job]:
        """`jobs` without those whose client has gone (forgotten here: nobody waits for their answer)."""
        for job in jobs:
            if job.dropped:
                self.open.pop(id(job), None)
        return [job for job in jobs if not job.dropped]

    def _take(self) -> list[Job] | None:
        """The next round's jobs: the first to arrive, and any that join within the wait or the token budget."""
        first = self.queue.get()
        if first is None:
            return None
        jobs, tokens = [first], first.tokens(self.shared)
        deadline = time.monotonic() + self.wait
        while tokens < self.budget:
            try:
                job = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                self.queue.put(None)  # stop after this round
                break
            jobs.append(job)
            tokens += job.tokens(self.shared)
        return jobs

    def _arrived(self) -> tuple[list[Job], bool]:
        """(jobs queued while the model ran, whether the stop came among them), without waiting."""
        jobs = []
        while True:
            try:
                job = self.queue.get_nowait()
            except queue.Empty:
                return jobs, False
            if job is None:
                return jobs, True
            jobs.append(job)

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as e:  # noqa: BLE001 - a dead thread must fail its waiters and stop the server
            with self.lock:
                self.died = e
                waiting, self.open = list(self.open.values()), {}
                while not self.queue.empty():
                    self.queue.get_nowait()
            log.critical("the model thread stopped: %s: %s", type(e).__name__, e, exc_info=True)
            for job in waiting:
                job.failed = True
                job.done(None)
            if self.on_fatal is not None:
                self.on_fatal(e)

    def _serve(self) -> None:
        pending: list[Part] = []
        stopping = False
        while pending or not stopping:
            if pending:
                jobs, stop = self._arrived()
                stopping = stopping or stop
            else:
                jobs = self._take()
                if jobs is None:
                    return
            jobs = self._live(jobs)
            self._live([p.job for p in pending])  # forgets the jobs whose client went while their parts waited
            pending = [p for p in pending if not p.job.dropped]
            if jobs:
                self.rounds = [*self.rounds[-999:], len(jobs)]
            try:
                pending += parts_of(jobs, self.budget, self.shared, self.max_row, self.cached)
                if not pending:
                    continue
                batch, pending = self._next(pending)
                self._score(batch)
            except Exception as e:  # noqa: BLE001 - a bug here must not end the thread: every later request would hang
                waiting = {id(p.job): p.job for p in pending} | {id(j): j for j in jobs}
                ids = ", ".join(j.request_id for j in waiting.values() if j.left and not j.failed)
                log.error("batching failed for requests %s: %s", ids, e, exc_info=True)
                for job in waiting.values():
                    if job.left and not job.failed:
                        self._finish(job, None)
                pending = []

    def _next(self, pending: list[Part]) -> tuple[list[Part], list[Part]]:
        """(the batch to score now, the parts left): the first (widest, full) batch of a longest-first cut, or the
        one holding the job passed over most once that has waited two batches."""
        batches = cut(pending, self.budget)
        chosen = max(batches, key=lambda b: max(p.job.passed for p in b))
        batch = chosen if max(p.job.passed for p in chosen) >= 2 else batches[0]
        rest = [p for b in batches if b is not batch for p in b]
        served = {id(p.job) for p in batch}
        for job in {id(p.job): p.job for p in rest if id(p.job) not in served}.values():
            job.passed += 1
        return batch, rest

    def _forward(self, groups: list[EncodedGroup]) -> list[Output]:
        """The batch's rewards, its parts (`split`) scored at once; the first error raised once every part ended,
        so no part of a batch runs beside the next batch."""
        parts = split(groups, self.threads, self.shared)
        if self.parts is None or len(parts) == 1:
            return self.forward(groups)
        others = [self.parts.submit(self.forward, part) for part in parts[1:]]
        try:
            first = self.forward(parts[0])
        finally:
            wait(others)
        return first + [r for f in others for r in f.result()]

    def _score(self, batch: list[Part]) -> None:
        self._live([p.job for p in batch])  # forgets the jobs whose client went while this batch was cut
        live = [p for p in batch if not p.job.failed and not p.job.dropped]
        if not live:
            return
        started = time.monotonic()
        try:
            groups = [p.group for p in live]
            rewards = self._forward(groups)
            self.scored += responses(groups)
            self.tokens += sum(cost(g, self.shared) for g in groups)
            self.prompt_tokens += sum(self._prompt_cost(g) for g in groups)
        except Exception as e:  # noqa: BLE001 - any model failure fails this batch's requests, not the server
            failed = sorted({p.job.request_id for p in live})
            log.error("model error on a batch of requests %s: %s", ", ".join(failed), e, exc_info=True)
            for p in live:
                if not p.job.failed:
                    self._finish(p.job, None)
            return
        finally:
            self.after_batch()  # the server gives the batch's freed memory back
            self.busy += time.monotonic() - started
        it = iter(rewards)  # one per response, part after part
        for p in live:
            n = len(p.group.response_ids)
            for k in range(n):
                p.job.rewards[p.item][p.start + k] = next(it)
            p.job.left -= n
            if p.job.left == 0:
                self._finish(p.job, p.job.rewards)
