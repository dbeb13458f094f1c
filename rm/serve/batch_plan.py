"""How queued requests become batches: each request's items cut into parts that fit the token budget, and parts
cut into batches longest first (rm/serve/batcher.py runs them). An item is the groups `rm score` encodes for its
texts (`rm.collate.scoring`'s unit, a text a group of one); a part is a piece of one group, so its prompt is
computed once: the shared layout packs parts into rows first-fit, a group on a cached prompt
(rm/model/cached_prompt.py) costs its tokens. The packer and the fill-within-budget loop are training's
(rm/collate/token_budget.py), so a batch counts the rows the collator lays out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rm.collate.scoring import part, responses, tokens
from rm.collate.token_budget import Rows, fill
from rm.tokens.store import EncodedGroup

Output = float | list[float] | list[list[float]]
"""What the model gives one response: its reward, or [reward, *attributes] with attribute outputs; an ensemble's
(`rm serve --ensemble`), one of those per member."""

MAX_ROW = 8192
"""Tokens of one packed row at most (unless max_length is longer): the shared layout's attention mask is
[rows, T, T], so a group of many long responses is cut into parts rather than one row of the whole budget."""


def cost(group: EncodedGroup, shared: bool) -> int:
    """Tokens the model computes for `group`: its segment in the shared layout (the prompt once), else each
    response after its own copy of the prompt (padding not counted)."""
    if shared:
        return tokens(group)
    return len(group.prompt_ids) * len(group.response_ids) + sum(len(r) for r in group.response_ids)


@dataclass
class Job:
    """One request's items waiting for rewards; `done` is called once, from the model thread."""

    request_id: str
    items: list[list[EncodedGroup]]
    """Per item (a text, or a /score_groups group): the groups its texts were encoded as, usually one."""
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
        self.rewards = [[0.0] * responses(item) for item in self.items]
        self.left = sum(responses(item) for item in self.items)

    def tokens(self, shared: bool) -> int:
        """Token slots its items take: in the shared layout a group's prompt counts once."""
        return sum(cost(g, shared) for item in self.items for g in item)


@dataclass
class Part:
    """Responses of one group of one item that go into one batch together."""

    job: Job
    item: int
    start: int
    """The flat index of its first response among the item's responses (group after group)."""
    group: EncodedGroup
    """The group's prompt and the responses of this part (all of them, or a piece)."""
    shared: bool
    cached: bool = False
    """Responses to one prompt scored on its cached keys and values (rm/model/cached_prompt.py): they cost their
    tokens, the prompt once, and take no packed row."""

    @property
    def width(self) -> int:
        """The row it needs: in the shared layout its segment (the prompt once, then every response); else the
        prompt and its longest response (each response is a padded row of its own)."""
        if self.shared:
            return tokens(self.group)
        return len(self.group.prompt_ids) + max(len(r) for r in self.group.response_ids)


def split_item(job: Job, item: int, budget: int, shared: bool, max_row: int, cached: bool = False) -> list[Part]:
    """An item as parts, each a piece of one of its groups that fits the budget alone, and in the shared layout a
    row of at most `max_row` tokens (one response alone always makes a part); with `cached` (groups on a cached
    prompt) a group of two or more responses to a non-empty prompt is one part wherever its tokens fit the budget,
    as no row limits it, unless it is stepwise (/score_steps: its steps are read in the layout, `Scorer.forward`)."""
    parts, start = [], 0
    for group in job.items[item]:
        n = len(group.response_ids)
        if cached and n > 1 and len(group.prompt_ids) and tokens(group) <= budget and not group.step_ends:
            parts.append(Part(job, item, start, group, shared, cached=True))
        else:
            parts += [
                Part(job, item, start + s, piece(group, s, e), shared)
                for s, e in pieces(group, budget, shared, max_row)
            ]
        start += n
    return parts


def piece(group: EncodedGroup, start: int, end: int) -> EncodedGroup:
    """Responses [start, end) of `group` on its prompt, with their steps' ends where it is stepwise (/score_steps)."""
    if not group.step_ends:
        return part(group, start, end)
    return replace(part(group, start, end), step_ends=group.step_ends[start:end])


def pieces(group: EncodedGroup, budget: int, shared: bool, max_row: int) -> list[tuple[int, int]]:
    """`group`'s responses cut into runs [start, end) in order: in the shared layout a run's segment (the prompt
    once) stays within min(budget, max_row); padded, its rows (as many as responses, each as wide as the prompt
    and the run's longest response) stay within the budget. A response alone always makes a run."""
    prompt, lengths = len(group.prompt_ids), [len(r) for r in group.response_ids]
    out, start = [], 0
    while start < len(lengths):
        end, longest, row = start + 1, lengths[start], prompt + lengths[start]
        while end < len(lengths):
            longest = max(longest, lengths[end])
            row += lengths[end]
            if (shared and row > min(budget, max_row)) or (
                not shared and (end + 1 - start) * (prompt + longest) > budget
            ):
                break
            end += 1
        out.append((start, end))
        start = end
    return out


class Fill:
    """A batch being filled, longest part first, and its token slots: packed rows first-fit (as the shared layout
    packs them) times the first part's width, or one padded row per response as wide as the first's widest."""

    def __init__(self) -> None:
        self.first: Part | None = None
        """Sets the width of every row and the layout (parts come longest first: the width holds)."""
        self.rows = Rows(0)
        """Packed rows (shared layout), as wide as the first part; a part on a cached prompt takes none."""
        self.responses = 0
        """Padded rows: one a response."""
        self.cached = 0
        """Tokens of groups on a cached prompt."""

    def slots(self) -> int:
        if self.first is None:
            return 0
        return (self.rows.count if self.first.shared else self.responses) * self.first.width + self.cached

    def cost_with(self, part: Part) -> int:
        """Its slots with `part` too."""
        width = part.width if self.first is None else self.first.width
        if part.cached:
            return self.slots() + part.width
        if part.shared:
            return self.slots() + (0 if self.rows.fits(part.width) else width)
        return self.slots() + len(part.group.response_ids) * width

    def add(self, part: Part) -> None:
        if self.first is None:
            self.first, self.rows = part, Rows(part.width)
        if part.cached:
            self.cached += part.width
        elif part.shared:
            self.rows.add(part.width)
        else:
            self.responses += len(part.group.response_ids)


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


def split(groups: list[EncodedGroup], n: int, shared: bool) -> list[list[EncodedGroup]]:
    """`groups` in at most `n` runs, in order, of about the same tokens each (`cost`): the parts of one batch that
    its threads score at once (`Batcher`), the rewards read back in order."""
    total, done, out = sum(cost(g, shared) for g in groups), 0, [[]]
    for g in groups:
        if out[-1] and len(out) < n and done >= total * len(out) / n:
            out.append([])
        out[-1].append(g)
        done += cost(g, shared)
    return out
