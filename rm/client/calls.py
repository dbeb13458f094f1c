"""A client call cut into requests the server accepts, and their replies joined back in the caller's order.

The server refuses more than `--max-texts` texts (or group responses) in one request (413); an RL step can hold
more completions than that, so the clients cut a call at the limit `/info` reports and join the rewards. Cutting
changes no reward: the server gives every text the reward `rm score` gives it, whatever it is batched with. A
group (or a /score_steps problem) is never cut (its prompt is computed once for all its responses); one over the
limit goes alone and the server's 413 says why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from rm.client.server_error import RewardRequestError, RewardServerError

UNLIMITED = 1 << 30
"""The limit assumed when `/info` names none."""


def request_body(body: Any) -> bytes:
    """`body` as the JSON bytes of a request. UTF-8 as httpx would send it, except where a string holds a lone
    surrogate (no UTF-8 can): then ASCII with \\u escapes, so the server answers 400 naming the item rather than
    the client failing on an encoding error. A nesting too deep for Python's json (~1,000 levels) is refused here,
    as the server would refuse it."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("ascii")
    except RecursionError:
        raise RewardRequestError(None, "the request is nested too deeply to encode as JSON") from None


def max_texts_of(info: dict[str, Any]) -> int:
    value = info.get("max_texts")
    return value if isinstance(value, int) and value > 0 else UNLIMITED


def as_groups(groups: Iterable[Any]) -> list[dict[str, Any]]:
    """Groups as the API's {"prompt", "responses"} objects; a (prompt, responses) tuple is taken too. What a
    prompt or a response may be is the server's to check (it answers 400 naming the item)."""
    out = []
    for i, group in enumerate(groups):
        if isinstance(group, dict):
            if set(group) != {"prompt", "responses"}:
                raise TypeError(f"groups[{i}] must have exactly the keys prompt and responses, got {sorted(group)}")
            prompt, responses = group["prompt"], group["responses"]
        elif isinstance(group, tuple) and len(group) == 2:
            prompt, responses = group
        else:
            raise TypeError(f"groups[{i}] must be a {{prompt, responses}} dict or a (prompt, responses) tuple")
        if isinstance(responses, (str, dict)) or not isinstance(responses, Sequence):
            raise TypeError(f"groups[{i}] responses must be a list, got {type(responses).__name__}")
        out.append({"prompt": prompt, "responses": list(responses)})
    return out


def flat_parts(items: list[Any], limit: int) -> list[list[Any]]:
    """`items` in consecutive slices of at most `limit`."""
    return [items[i : i + limit] for i in range(0, len(items), limit)]


def group_parts(groups: list[dict[str, Any]], limit: int) -> list[list[dict[str, Any]]]:
    """Consecutive groups in requests of at most `limit` responses, a group never split."""
    return sized_parts(groups, [len(group["responses"]) for group in groups], limit)


def sized_parts(items: list[Any], sizes: list[int], limit: int) -> list[list[Any]]:
    """Consecutive items in requests whose `sizes` add up to at most `limit`, an item never split."""
    parts: list[list[Any]] = []
    count = limit  # forces a new part for the first item
    for item, n in zip(items, sizes, strict=True):
        if count + n > limit:
            parts.append([])
            count = 0
        parts[-1].append(item)
        count += n
    return parts


def as_problems(problems: Any) -> tuple[bool, list[dict[str, Any]]]:
    """(whether one problem was given, the problems): a {"prompt", "solutions"} or {"prompt", "completions"} dict,
    or a list of them. What their fields hold is the server's to check (it answers 400 or 422 naming the item)."""
    one = isinstance(problems, dict)
    items = [problems] if one else list(problems)
    for i, p in enumerate(items):
        if not isinstance(p, dict) or ("solutions" in p) == ("completions" in p):
            raise TypeError(f"problems[{i}] must be a dict with a prompt and either solutions or completions")
    return one, items


def step_sizes(problems: list[dict[str, Any]]) -> list[int]:
    """What each problem counts against --max-texts: its solutions, and at least 1 (the server counts problems
    too)."""
    return [max(1, len(p["solutions"])) if isinstance(p.get("solutions"), list) else 1 for p in problems]


def step_scores(reply: dict[str, Any], problems: list[dict[str, Any]]) -> list[Any]:
    """The `step_scores` of a /score_steps reply to {"items": problems}: one entry per problem, each a list per
    solution (a `completions` problem: one list), of numbers or null (a step past max_length), kept as None."""
    values = reply.get("step_scores")
    if not isinstance(values, list) or len(values) != len(problems):
        raise _bad_reply(f"'step_scores' should be {len(problems)} entries, one per problem, got {_describe(values)}")
    for k, (value, problem) in enumerate(zip(values, problems, strict=True)):
        lists = [value] if "completions" in problem else value
        if not isinstance(lists, list) or not all(
            isinstance(row, list) and all(_is_score(v) for v in row) for row in lists
        ):
            raise _bad_reply(f"'step_scores[{k}]' is not a list of step scores per solution")
    return values


def _is_score(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


class Rewards(list):
    """A list of rewards (floats: it compares, indexes and serialises as one) that also holds, in `attributes`,
    the attribute outputs the server sent beside them: one {name: value} per reward, or None for a model without
    attribute outputs (`rm serve`'s /info `attributes` names them)."""

    def __init__(self, rewards: Iterable[float] = (), attributes: list[dict[str, float]] | None = None):
        super().__init__(rewards)
        self.attributes = attributes


def joined(parts: Iterable[Rewards]) -> Rewards:
    """The rewards of consecutive requests as one list, their attributes too (None unless every part has them)."""
    parts = list(parts)
    attributes = [a for p in parts for a in p.attributes] if all(p.attributes is not None for p in parts) else None
    return Rewards((r for p in parts for r in p), attributes if parts else None)


def flat_rewards(reply: dict[str, Any], n: int) -> Rewards:
    """The `rewards` of a /score reply, checked to be one number per text sent (null, a reward that was not
    finite, becomes NaN, as TRL reads a reward function's None), with its `attributes` where it has them."""
    rewards = _numbers(reply.get("rewards"), n, "rewards")
    return Rewards(rewards, _attributes(reply.get("attributes"), n, "attributes"))


def group_rewards(reply: dict[str, Any], sizes: list[int]) -> list[Rewards]:
    """The `rewards` of a /score_groups reply: one list per group sent, each as long as its group, with that
    group's `attributes` where the reply has them."""
    lists = reply.get("rewards")
    if not isinstance(lists, list) or len(lists) != len(sizes):
        raise _bad_reply(f"'rewards' should be {len(sizes)} lists, one per group, got {_describe(lists)}")
    attributes = reply.get("attributes")
    if attributes is not None and (not isinstance(attributes, list) or len(attributes) != len(sizes)):
        raise _bad_reply(f"'attributes' should be {len(sizes)} lists, one per group, got {_describe(attributes)}")
    return [
        Rewards(
            _numbers(values, n, f"rewards[{g}]"),
            None if attributes is None else _attributes(attributes[g], n, f"attributes[{g}]"),
        )
        for g, (values, n) in enumerate(zip(lists, sizes, strict=True))
    ]


def _attributes(values: Any, n: int, name: str) -> list[dict[str, float]] | None:
    """A reply's attribute outputs, one {name: number} per text (null, not finite, becomes NaN), or None when the
    reply has none."""
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != n or not all(isinstance(v, dict) for v in values):
        raise _bad_reply(f"{name!r} should be {n} objects of attribute outputs, got {_describe(values)}")
    return [dict(zip(v, _numbers(list(v.values()), len(v), name), strict=True)) for v in values]


def _numbers(values: Any, n: int, name: str) -> list[float]:
    if not isinstance(values, list) or len(values) != n:
        raise _bad_reply(f"{name!r} should be {n} numbers, got {_describe(values)}")
    out = []
    for v in values:
        if v is None:
            out.append(math.nan)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
        else:
            raise _bad_reply(f"{name!r} holds a {type(v).__name__}, not a number")
    return out


def _describe(value: Any) -> str:
    return f"{len(value)} items" if isinstance(value, list) else f"a {type(value).__name__}"


def _bad_reply(message: str) -> RewardServerError:
    """A 200 whose body is not what the API promises (a different server on that port, a proxy's page)."""
    return RewardServerError(200, f"unexpected reply: {message}")
