"""One model thread that coalesces every queued request into token-budgeted batches, longest first.

Requests arrive already checked and tokenized (rm/serve/bodies.py), so nothing that enters a batch can be a bad
request. The thread takes the first queued job, waits up to `max_wait_ms` for others (or until `max_batch_tokens`
worth is queued), then orders the items of all of them (a text, or one group's responses) by length, longest
first, and cuts batches whose padded or packed size stays within the budget. A group's responses stay together
in one batch so that its prompt is computed once (an item too large for the budget is cut into parts, each
computing the prompt again). Each reward is read at its own sequence's end and sees only its own tokens, so no
reward depends on its batch neighbours (tests/serve/ checks against `rm score`'s rewards, 1e-5).

A model error (out of memory, a bad kernel) fails the requests that had items in that batch, with their request
ids logged, and the thread goes on with the next batch.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rm.collate.scoring import ScoreSeq
from rm.tokens.store import same_ids

log = logging.getLogger("rm.serve")

MAX_ROW = 8192
"""Tokens of one packed row at most (unless max_length is longer): the shared layout's attention mask is
[rows, T, T], so a group of many long responses is cut into parts rather than one row of the whole budget."""


class ModelFailed(Exception):
    """The model raised on a batch holding this request; the request gets a 500."""


@dataclass
class Job:
    """One request's items waiting for rewards; `done` is called once, from the model thread."""

    request_id: str
    items: list[list[ScoreSeq]]
    done: Callable[[list[list[float]] | None], None]
    """Called with one list of raw rewards per item, or None when the model failed on one of its batches."""
    rewards: list[list[float]] = field(default_factory=list)
    left: int = 0
    failed: bool = False

    def __post_init__(self) -> None:
        self.rewards = [[0.0] * len(seqs) for seqs in self.items]
        self.left = sum(len(seqs) for seqs in self.items)

    def tokens(self, shared: bool) -> int:
        """Token slots its items take: in the shared layout a group's prompt counts once."""
        if shared:
            return sum(segment(seqs) for seqs in self.items)
        return sum(len(s) for seqs in self.items for s in seqs)


@dataclass
class Part:
    """Sequences of one item that go into one batch together: (job, item index, first sequence index)."""

    job: Job
    item: int
    start: int
    seqs: list[ScoreSeq]
    shared: bool

    @property
    def width(self) -> int:
        """The row it needs: in the shared layout its segment (a group's prompt once, then every response); else
        its longest sequence (each sequence is a padded row of its own)."""
        return segment(self.seqs) if self.shared else max(len(s) for s in self.seqs)


def segment(seqs: list[ScoreSeq]) -> int:
    """Tokens of these sequences side by side in a packed row, each shared prompt once."""
    return sum(shared_length(a, b) for a, b in zip([None, *seqs], seqs, strict=False))


def shared_length(before: ScoreSeq | None, seq: ScoreSeq) -> int:
    """Tokens `seq` adds to a packed row after `before`: its response alone where the two share their prompt
    ids (the layout computes that prompt once), else the whole sequence. A group's responses share them unless
    one could not fit max_length even alone and was fitted on its own (rm/evaluation/score_file.py)."""
    if before is not None and same_ids(before.prompt_ids, seq.prompt_ids):
        return len(seq.response_ids)
    return len(seq)


def split_item(job: Job, item: int, budget: int, shared: bool, max_row: int) -> list[Part]:
    """An item as parts that each fit the budget alone, and in the shared layout a row of at most `max_row` tokens
    (a sequence alone always makes a part)."""
    seqs, parts, start = job.items[item], [], 0
    while start < len(seqs):
        end, longest, segment = start + 1, len(seqs[start]), len(seqs[start])
        while end < len(seqs):
            longest = max(longest, len(seqs[end]))
            segment += shared_length(seqs[end - 1], seqs[end])
            if (shared and segment > min(budget, max_row)) or (not shared and (end + 1 - start) * longest > budget):
                break
            end += 1
        parts.append(Part(job, item, start, seqs[start:end], shared))
        start = end
    return parts


class Fill:
    """A batch being filled, longest part first, and its token slots: packed rows first-fit (as the shared layout
    packs them) times the first part's width, or one padded row per sequence as wide as the first's longest."""

    def __init__(self, first: Part):
        self.parts, self.width = [first], first.width
        self.room = [0]  # free tokens per packed row
        self.seqs = len(first.seqs)

    def add(self, part: Part, budget: int) -> bool:
        """Take `part` if the batch stays within `budget` slots (parts come longest first: the width holds)."""
        if part.shared:
            need = part.width
            row = next((r for r, free in enumerate(self.room) if free >= need), None)
            if row is None and (len(self.room) + 1) * self.width > budget:
                return False
            if row is None:
                self.room.append(self.width - need)
            else:
                self.room[row] -= need
        else:
            if (self.seqs + len(part.seqs)) * self.width > budget:
                return False
            self.seqs += len(part.seqs)
        self.parts.append(part)
        return True


def plan(jobs: list[Job], budget: int, shared: bool, max_row: int) -> list[list[Part]]:
    """Every item of `jobs` in batches within `budget` token slots, longest first (which keeps each batch's rows
    alike in length, so padding stays small)."""
    parts = [p for job in jobs for i in range(len(job.items)) for p in split_item(job, i, budget, shared, max_row)]
    parts.sort(key=lambda p: -p.width)
    batches: list[Fill] = []
    for part in parts:
        if not batches or not batches[-1].add(part, budget):
            batches.append(Fill(part))
    return [b.parts for b in batches]


class Batcher:
    """The queue and the one thread that runs the model (a GPU or torch's CPU threads serve one forward at a time)."""

    def __init__(
        self,
        forward: Callable[[list[ScoreSeq]], list[float]],
        shared: bool,
        max_batch_tokens: int,
        max_wait_ms: float,
        max_row: int = MAX_ROW,
    ):
        self.forward = forward
        self.shared = shared
        self.budget = max_batch_tokens
        self.max_row = max_row
        self.wait = max_wait_ms / 1000
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="rm-serve-model", daemon=True)
        self.rounds: list[int] = []
        """Jobs taken together in each round (what tests read to see requests coalesce); the last 1000."""

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Score what is queued, then end the thread (the server's shutdown, after its last request arrived)."""
        self.queue.put(None)
        self.thread.join()

    async def score(self, request_id: str, items: list[list[ScoreSeq]]) -> list[list[float]]:
        """Raw rewards per item, once the model thread has scored every sequence; ModelFailed if it could not."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def done(rewards: list[list[float]] | None) -> None:
            try:
                loop.call_soon_threadsafe(lambda: future.done() or future.set_result(rewards))
            except RuntimeError:  # the loop has closed (a forced stop): nobody waits for this answer
                pass

        if not any(items):
            return [[] for _ in items]
        self.queue.put(Job(request_id, items, done))
        rewards = await future
        if rewards is None:
            raise ModelFailed(request_id)
        return rewards

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

    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            self.rounds = [*self.rounds[-999:], len(jobs)]
            try:
                for batch in plan(jobs, self.budget, self.shared, self.max_row):
                    self._score(batch)
            except Exception as e:  # noqa: BLE001 - a bug here must not end the thread: every later request would hang
                ids = ", ".join(job.request_id for job in jobs if job.left and not job.failed)
                log.error("batching failed for requests %s: %s", ids, e, exc_info=True)
                for job in jobs:
                    if job.left and not job.failed:
                        job.failed = True
                        job.done(None)

    def _score(self, batch: list[Part]) -> None:
        live = [p for p in batch if not p.job.failed]
        if not live:
            return
        try:
            rewards = self.forward([s for p in live for s in p.seqs])
        except Exception as e:  # noqa: BLE001 - any model failure fails this batch's requests, not the server
            failed = sorted({p.job.request_id for p in live})
            log.error("model error on a batch of requests %s: %s", ", ".join(failed), e, exc_info=True)
            for p in live:
                if not p.job.failed:
                    p.job.failed = True
                    p.job.done(None)
            return
        it = iter(rewards)
        for p in live:
            for k in range(len(p.seqs)):
                p.job.rewards[p.item][p.start + k] = next(it)
            p.job.left -= len(p.seqs)
            if p.job.left == 0:
                p.job.done(p.job.rewards)
