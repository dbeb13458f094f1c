"""How queued requests become batches: each request's items cut into parts that fit the token budget, and parts
cut into batches longest first (rm/serve/batcher.py runs them). A group's responses stay in one part, so its
prompt is computed once; the shared layout packs parts into rows first-fit, a group on a cached prompt
(rm/model/cached_prompt.py) costs its tokens. The packer and the fill-within-budget loop are training's
(rm/collate/token_budget.py), so a batch counts the rows the collator lays out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rm.collate.scoring import ScoreSeq
from rm.collate.token_budget import Rows, fill
from rm.tokens.store import same_ids

Output = float | list[float]
"""What the model gives one sequence: its reward, or [reward, *attributes] with attribute outputs."""

MAX_ROW = 8192
"""Tokens of one packed row at most (unless max_length is longer): the shared layout's attention mask is
[rows, T, T], so a group of many long responses is cut into parts rather than one row of the whole budget."""


@dataclass
class Job:
    """One request's items waiting for rewards; `done` is called once, from the model thread."""

    request_id: str
    items: list[list[ScoreSeq]]
    done: Callable[[list[list[Output]] | None], None]
    """Called with one list of raw rewards per item, or None when the model failed on one of its batches."""
    rewards: list[list[Output]] = field(default_factory=list)
    left: int = 0
    failed: bool = False
    dropped: bool = False
    """Its client has gone: the model thread drops its parts before its next batch."""
    passed: int = 0
    """Batches scored without any of its parts while it waited (the thread serves it once this reaches 2)."""

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
    cached: bool = False
    """Responses to one prompt scored on its cached keys and values (rm/model/cached_prompt.py): they cost their
    tokens, the prompt once, and take no packed row."""

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


def split_item(job: Job, item: int, budget: int, shared: bool, max_row: int, cached: bool = False) -> list[Part]:
    """An item as parts that each fit the budget alone, and in the shared layout a row of at most `max_row` tokens
    (a sequence alone always makes a part); with `cached` (groups on a cached prompt) no row limits a group."""
    seqs, parts, start = job.items[item], [], 0
    if cached and len(seqs) > 1 and segment(seqs) <= budget and same_ids(seqs[0].prompt_ids, seqs[-1].prompt_ids):
        return [Part(job, item, 0, seqs, shared, cached=True)]
    while start < len(seqs):
        end, longest, row = start + 1, len(seqs[start]), len(seqs[start])
        while end < len(seqs):
            longest = max(longest, len(seqs[end]))
            row += shared_length(seqs[end - 1], seqs[end])
            if (shared and row > min(budget, max_row)) or (not shared and (end + 1 - start) * longest > budget):
                break
            end += 1
        parts.append(Part(job, item, start, seqs[start:end], shared))
        start = end
    return parts


class Fill:
    """A batch being filled, longest part first, and its token slots: packed rows first-fit (as the shared layout
    packs them) times the first part's width, or one padded row per sequence as wide as the first's longest."""

    def __init__(self) -> None:
        self.first: Part | None = None
        """Sets the width of every row and the layout (parts come longest first: the width holds)."""
        self.rows = Rows(0)
        """Packed rows (shared layout), as wide as the first part; a part on a cached prompt takes none."""
        self.seqs = 0
        """Padded rows: one a sequence."""
        self.cached = 0
        """Tokens of groups on a cached prompt."""

    def slots(self) -> int:
        if self.first is None:
            return 0
        return (self.rows.count if self.first.shared else self.seqs) * self.first.width + self.cached

    def cost_with(self, part: Part) -> int:
        """Its slots with `part` too."""
        width = part.width if self.first is None else self.first.width
        if part.cached:
            return self.slots() + part.width
        if part.shared:
            return self.slots() + (0 if self.rows.fits(part.width) else width)
        return self.slots() + len(part.seqs) * width

    def add(self, part: Part) -> None:
        if self.first is None:
            self.first, self.rows = part, Rows(part.width)
        if part.cached:
            self.cached += part.width
        elif part.shared:
            self.rows.add(part.width)
        else:
            self.seqs += len(part.seqs)


def plan(jobs: list[Job], budget: int, shared: bool, max_row: int, cached: bool = False) -> list[list[Part]]:
    """Every item of `jobs` in batches within `budget` token slots, longest first (which keeps each batch's rows
    alike in length, so padding stays small)."""
    return cut(parts_of(jobs, budget, shared, max_row, cached), budget)


def parts_of(jobs: list[Job], budget: int, shared: bool, max_row: int, cached: bool = False) -> list[Part]:
    return [
        p for job in jobs for i in range(len(job.items)) for p in split_item(job, i, budget, shared, max_row, cached)
    ]


def cut(parts: list[Part], budget: int) -> list[list[Part]]:
    """`parts` in batches within `budget`, longest first."""
    return fill(sorted(parts, key=lambda p: -p.width), budget, Fill)
