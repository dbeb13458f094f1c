"""`RewardClient` and `AsyncRewardClient`: the routes of `rm serve` as methods that return rewards.

Both keep one connection pool (httpx) for their life: an RL loop calls them every step, and a new TCP connection
per call would cost more than a small reward model's forward. Use them as context managers, or `close()` them.
The async client sends the requests of a call cut at `--max-texts` (rm/client/calls.py) at once; the server
coalesces them into its batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

import httpx

from rm.client.calls import (
    Rewards,
    as_groups,
    as_problems,
    flat_parts,
    flat_rewards,
    group_parts,
    group_rewards,
    joined,
    max_texts_of,
    request_body,
    sized_parts,
    step_scores,
    step_sizes,
)
from rm.client.server_error import auth_headers, read_reply, unreachable

Message = dict[str, str]
"""{"role": "user" | "assistant" | "system", "content": str}"""


def json_content(body: dict[str, Any] | None) -> dict[str, Any]:
    """httpx's request arguments for a JSON body (encoded by `request_body`), or none for a GET."""
    if body is None:
        return {}
    return {"content": request_body(body), "headers": {"content-type": "application/json"}}


class RewardClient:
    """A blocking client of `rm serve` at `url` (e.g. "http://127.0.0.1:8000").

    Every method raises `RewardServerError` when the server refuses the request, fails, or cannot be reached."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 60.0):
        self.url = url
        self._http = httpx.Client(base_url=url, headers=auth_headers(api_key), timeout=timeout)
        self._max_texts: int | None = None  # read from /info on first need

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def health(self) -> dict[str, Any]:
        """{"status": "ok"} (needs no key): whether the server is up and its model loaded."""
        return self._call("GET", "/health")

    def info(self) -> dict[str, Any]:
        """The model, max_length, truncation side, normalisation, layout and the server's limits."""
        return self._call("GET", "/info")

    def score(self, texts: Sequence[str]) -> Rewards:
        """One reward per whole text (prompt and answer together, as `rm score` scores a `text` record): a list of
        floats whose `attributes` holds the model's attribute outputs, one {name: value} per text (None without)."""
        return self._flat("texts", list(texts))

    def score_messages(self, conversations: Sequence[list[Message]]) -> Rewards:
        """One reward per conversation ending in the assistant's answer, rendered with the model's chat template
        (a list of floats with `attributes`, as `score` returns)."""
        return self._flat("messages", list(conversations))

    def score_groups(self, groups: Iterable[Any]) -> list[Rewards]:
        """One list of rewards per {"prompt", "responses"} group, in order, each with its `attributes` (as `score`
        returns); each prompt is computed once."""
        groups = as_groups(groups)
        out: list[Rewards] = []
        for part in group_parts(groups, self._limit()) if groups else []:
            reply = self._call("POST", "/score_groups", {"groups": part})
            out += group_rewards(reply, [len(g["responses"]) for g in part])
        return out

    def score_steps(self, problems: dict[str, Any] | Sequence[dict[str, Any]]) -> list[Any]:
        """Step scores, P(step correct): a problem {"prompt", "solutions": [[step, ...], ...]} -> [[p, ...], ...]
        per solution, {"prompt", "completions": [step, ...]} -> [p, ...]; a list of problems -> a list of those.
        None for a step past max_length. Each step is followed by the server's separator (/info's step_separator)."""
        one, items = as_problems(problems)
        out: list[Any] = []
        for part in sized_parts(items, step_sizes(items), self._limit()) if items else []:
            out += step_scores(self._call("POST", "/score_steps", {"items": part}), part)
        return out[0] if one else out

    def _flat(self, key: str, items: list[Any]) -> Rewards:
        parts = flat_parts(items, self._limit()) if items else []
        return joined(flat_rewards(self._call("POST", "/score", {key: part}), len(part)) for part in parts)

    def _limit(self) -> int:
        if self._max_texts is None:
            self._max_texts = max_texts_of(self.info())
        return self._max_texts

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **json_content(body))
        except httpx.TransportError as e:
            raise unreachable(self.url, e) from e
        return read_reply(response)


class AsyncRewardClient:
    """`RewardClient`'s methods as coroutines, for an async rollout loop (or TRL's async reward functions)."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 60.0):
        self.url = url
        self._http = httpx.AsyncClient(base_url=url, headers=auth_headers(api_key), timeout=timeout)
        self._max_texts: int | None = None

    async def __aenter__(self) -> AsyncRewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> dict[str, Any]:
        return await self._call("GET", "/health")

    async def info(self) -> dict[str, Any]:
        return await self._call("GET", "/info")

    async def score(self, texts: Sequence[str]) -> Rewards:
        return await self._flat("texts", list(texts))

    async def score_messages(self, conversations: Sequence[list[Message]]) -> Rewards:
        return await self._flat("messages", list(conversations))

    async def score_groups(self, groups: Iterable[Any]) -> list[Rewards]:
        groups = as_groups(groups)
        parts = group_parts(groups, await self._limit()) if groups else []
        replies = await asyncio.gather(*(self._call("POST", "/score_groups", {"groups": p}) for p in parts))
        out: list[Rewards] = []
        for part, reply in zip(parts, replies, strict=True):
            out += group_rewards(reply, [len(g["responses"]) for g in part])
        return out

    async def score_steps(self, problems: dict[str, Any] | Sequence[dict[str, Any]]) -> list[Any]:
        one, items = as_problems(problems)
        parts = sized_parts(items, step_sizes(items), await self._limit()) if items else []
        replies = await asyncio.gather(*(self._call("POST", "/score_steps", {"items": p}) for p in parts))
        out = [s for part, reply in zip(parts, replies, strict=True) for s in step_scores(reply, part)]
        return out[0] if one else out

    async def _flat(self, key: str, items: list[Any]) -> Rewards:
        parts = flat_parts(items, await self._limit()) if items else []
        replies = await asyncio.gather(*(self._call("POST", "/score", {key: p}) for p in parts))
        return joined(flat_rewards(reply, len(part)) for part, reply in zip(parts, replies, strict=True))

    async def _limit(self) -> int:
        if self._max_texts is None:
            self._max_texts = max_texts_of(await self.info())
        return self._max_texts

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, **json_content(body))
        except httpx.TransportError as e:
            raise unreachable(self.url, e) from e
        return read_reply(response)
