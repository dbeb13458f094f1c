"""One prompt and K ranked responses as text, and the checks every K-response format shares.

A pair is the K = 2 case with ranks (0, 1); K-response records (UltraFeedback's ratings, Nectar's ranks,
RewardBench 2's chosen and rejected lists) become a `Group` whose ranks say what is known about the order:
0 is best, equal ranks tie. Scores (higher is better) become ranks densely, so two responses rated 4 tie
and the next one down gets the next rank whatever the gap.

Groups merged from pairwise records (`rm/data/grouping.py`, `data.group_by_prompt: true`) know only the
comparisons their records made, so they carry those explicitly in `pairs`; `responses_of`, `rank_of`,
`scores_of` and `pairs_of` read a `Pair` as the group of two it is, so code below the parsers need not ask
which one it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from rm.data.formats.pair import NO_LABELS, SCORE_MAX, SCORE_WHY, Pair, number_of
from rm.errors import RecordError

MISSING = ("N/A", "n/a", "NA", "")
"""Scores that say "not rated": UltraFeedback writes "N/A" where an annotation is missing."""


@dataclass
class Group:
    """A prompt and K >= 2 continuations of it; `prompt + responses[k]` is conversation k as the model sees it."""

    prompt: str
    responses: tuple[str, ...]
    rank: tuple[int, ...]
    """rank[k]: response k's place, 0 best; equal ranks tie."""
    subset: str
    _: KW_ONLY  # what the record says beyond its texts and order, by name
    origin: str = ""
    """"file:line", for error messages and reports."""
    turn_starts: tuple[int, ...] | None = None
    """Offsets in `prompt` where a long prompt may be cut; None: at its "\\n\\nHuman:" tags."""
    scores: tuple[float, ...] | None = None
    """The scores the ranks came from (margins are their differences); None for ranked data."""
    pairs: tuple[tuple[int, int, bool], ...] | None = None
    """Explicit comparisons (a, b, tie): a better than b, or a ties b. None: every two responses, ordered by
    rank. Set for groups merged from pairwise records, whose `rank` is then the level in the given order."""
    attributes: tuple[dict[str, float], ...] | None = None
    """Per response, its attribute scores by name (rm/data/formats/attributes.py); None: none given."""
    target: float | None = None
    """NaN with `loss.strength=soft` (a group keeps hard labels: rm/data/formats/strength.py); None otherwise."""
    labels: Mapping[str, Any] = NO_LABELS
    """Registered labels' values by name (rm/data/labels.py): a float, or one per response."""
    cycle: str = ""
    """A group merged from pairwise records whose strict comparisons form a cycle: those records' origins
    ("f.jsonl:1, f.jsonl:2, f.jsonl:3"), which make it a bad record for Plackett-Luce only; "" for none."""
    steps: tuple[tuple[str, ...], ...] | None = None
    """Stepwise data: per response, its steps as the model reads them, each followed by data.step_separator
    (`responses[k]` is their concatenation); None for preference data (rm/data/steps/step_groups.py)."""
    step_labels: tuple[tuple[float, ...], ...] | None = None
    """Per response, each step's target in [0, 1]; None for preference data."""


Example = Pair | Group
"""What loading gives: a pair, or one prompt with K ranked responses (a pair is the K = 2 case)."""


def responses_of(item: Pair | Group) -> tuple[str, ...]:
    return (item.chosen, item.rejected) if isinstance(item, Pair) else item.responses


def rank_of(item: Pair | Group) -> tuple[int, ...]:
    """A pair is (0, 1), or (0, 0) when it says a tie."""
    if isinstance(item, Pair):
        return (0, 0) if item.tie else (0, 1)
    return item.rank


def scores_of(item: Pair | Group) -> tuple[float, ...] | None:
    return None if isinstance(item, Pair) else item.scores


def pairs_of(item: Pair | Group) -> tuple[tuple[int, int, bool], ...] | None:
    return None if isinstance(item, Pair) else item.pairs


def attributes_of(item: Pair | Group) -> tuple[dict[str, float], ...] | None:
    """Per response (in `responses_of`'s order), its attribute scores by name; None when none were given."""
    return item.attributes


def score_of(value: Any, field: str, limit: float = SCORE_MAX, why: str = SCORE_WHY) -> float | None:
    """A score as a float, or None where the data says it is missing ("N/A", null): not a bad record. Within
    SCORE_MAX, so that the difference of two scores (a pair's margin) is within what the loss can take; an
    attribute score passes its own `limit`."""
    if value is None or (isinstance(value, str) and value.strip() in MISSING):
        return None
    return number_of(value, field, limit, why)


def ranks_from_scores(scores: list[float]) -> tuple[int, ...]:
    """Dense ranks, highest score first: [3, 5, 3, 1] -> (1, 0, 1, 2)."""
    places = {s: i for i, s in enumerate(sorted(set(scores), reverse=True))}
    return tuple(places[s] for s in scores)


def ranks_from_places(places: list[int], field: str) -> tuple[int, ...]:
    """Given ranks (any start, lower is better, no repeats) as ranks from 0: Nectar's 1..7 -> 0..6."""
    if len(set(places)) != len(places):
        repeated = sorted({p for p in places if places.count(p) > 1})
        raise RecordError(
            "duplicate_rank", f"field {field!r} gives rank {repeated[0]} to more than one response", field
        )
    order = sorted(places)
    return tuple(order.index(p) for p in places)


def checked_group(
    prompt: str, responses: list[str], rank: tuple[int, ...], names: list[str], subset: str, origin: str,
    field: str, order: str, **more: Any,
) -> Group:  # fmt: skip
    """The group, or the `RecordError` that makes it a bad record: fewer than 2 responses, an empty or repeated
    response, or every response tied (nothing to learn). `names[k]` is response k's field, `field` the list
    that holds them and `order` the field their scores or ranks come from, for the message."""
    if len(responses) < 2:
        message = f"field {field!r} has {len(responses)} response(s) with a score or rank; a group needs 2"
        raise RecordError("too_few_responses", message, field)
    seen: dict[str, int] = {}
    for k, text in enumerate(responses):
        if not text.strip():
            raise RecordError("empty_response", f"field {names[k]!r} is an empty response", names[k])
        if text in seen:
            first = names[seen[text]]
            raise RecordError("duplicate_response", f"fields {first!r} and {names[k]!r} are the same text", names[k])
        seen[text] = k
    if len(set(rank)) < 2:
        message = f"field {order!r}: every response has the same score or rank, nothing to learn from the group"
        raise RecordError("all_tied", message, order)
    return Group(prompt, tuple(responses), rank, subset, origin=origin, **more)
