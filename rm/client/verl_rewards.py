"""verl's reward loop calling `rm serve`: its per-sample reward calls of one rollout group coalesced into one
/score_groups request, so that the server computes the group's prompt once, not once per response.

verl 0.9's reward loop (verl/experimental/reward_loop) scores one sample per call. Its reward manager (`naive` by
default) awaits the custom reward function named by `reward.custom_reward_function`:

    compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)

`solution_str` is the decoded response (special tokens skipped); `extra_info` is the dataset row's `extra_info`
updated with the agent loop's extra fields, among them `raw_prompt` (the chat messages the policy answered);
`reward_kwargs` come from `reward.custom_reward_function.reward_kwargs` (with `reward.reward_model.enable`, verl
also passes `reward_router_address` and `reward_model_tokenizer`, its own vLLM/SGLang router: unused here). The
result is a float, or a dict whose "score" is the reward and whose other keys verl logs. The agent loop sends each
finished rollout to one of `reward.num_workers` reward-loop processes at random, so only `reward.num_workers=1`
brings a whole group to one process; the adapter's calls are waits on the server, which one process carries.

verl does not pass the rollout's `uid` (its group id) to the function: `compute_score` groups by `extra_info`'s
`uid` where a dataset or agent loop put one there, else by the prompt itself (the n samples of a uid share it).
`RmServeRewardManager`, a verl reward manager, reads `uid` and `raw_prompt` from the sample itself.

Flush rule: a group is sent once it holds `n` responses (verl's `actor_rollout_ref.rollout.n`), or `max_wait_s`
after its first response arrived when it does not fill (validation's `val_kwargs.n`, `n` not given); responses past
`n` start a new group. Groups that fill at the same moment go in one request (cut at the server's --max-texts).
Errors of the server (`RewardServerError`, rm/client/server_error.py) reach every caller of the request, and
stop verl's step rather than train on made-up rewards; so does a reward that is not finite.
"""

from __future__ import annotations

import asyncio
import json
import math
import weakref
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from rm.client.clients import AsyncRewardClient
from rm.client.server_error import RewardServerError

Attributes = dict[str, float] | None
MAX_WAIT_S = 2.0
"""Seconds a group that does not fill waits for more responses after its first (verl's rollouts of one prompt end
at different times; a group sent early still gets right rewards, its prompt computed once more)."""


@dataclass
class Group:
    """Responses to one prompt waiting to be sent, and the callers waiting for their rewards."""

    prompt: Any
    responses: list[str] = field(default_factory=list)
    futures: list[asyncio.Future] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class GroupCoalescer:
    """Per-sample reward calls gathered into groups by a group id, each group sent as one /score_groups group.
    One per event loop (its client's connections belong to the loop): `coalescer_for` finds it."""

    def __init__(self, url: str, n: int | None = None, max_wait_s: float = MAX_WAIT_S, **client: Any):
        if n is not None and n < 1:
            raise ValueError(f"n must be the rollout group size (actor_rollout_ref.rollout.n), got {n}")
        self.client = AsyncRewardClient(url, **client)
        self.n, self.wait = n, max_wait_s
        self.open: dict[Hashable, Group] = {}
        self.ready: list[Group] = []
        self.sending: set[asyncio.Task] = set()
        self.requests = 0
        """/score_groups calls made (the client cuts one at --max-texts into several HTTP requests)."""

    async def reward(self, group_id: Hashable, prompt: Any, response: str) -> tuple[float, Attributes]:
        """The reward of `prompt` + `response` (and its attribute outputs, or None), once its group was scored.
        Calls with the same `group_id` and prompt join one group; a different prompt never joins it."""
        loop = asyncio.get_running_loop()
        key = (group_id, json.dumps(prompt, sort_keys=True, ensure_ascii=False))
        group = self.open.get(key)
        if group is None:
            group = self.open[key] = Group(prompt)
            group.timer = loop.call_later(self.wait, self._close, key)
        future = loop.create_future()
        group.responses.append(response)
        group.futures.append(future)
        if self.n is not None and len(group.responses) >= self.n:
            self._close(key)
        return await future

    def _close(self, key: Hashable) -> None:
        """The group is complete (or has waited enough): it goes in the next request, sent once the callers
        ready now have joined their groups."""
        group = self.open.pop(key, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        if not self.ready:
            asyncio.get_running_loop().call_soon(self._flush)
        self.ready.append(group)

    def _flush(self) -> None:
        groups, self.ready = self.ready, []
        task = asyncio.ensure_future(self._send(groups))
        self.sending.add(task)  # held until done: the loop keeps only a weak reference to a task
        task.add_done_callback(self.sending.discard)

    async def _send(self, groups: list[Group]) -> None:
        self.requests += 1
        try:
            scored = await self.client.score_groups([(g.prompt, g.responses) for g in groups])
        except Exception as e:  # noqa: BLE001 - every caller of the request gets the error (RewardServerError)
            for future in (f for g in groups for f in g.futures):
                if not future.done():
                    future.set_exception(e)
            return
        for group, rewards in zip(groups, scored, strict=True):
            attributes = rewards.attributes or [None] * len(rewards)
            for future, reward, values in zip(group.futures, rewards, attributes, strict=True):
                if not future.done():  # a caller cancelled meanwhile
                    future.set_result((reward, values))


_coalescers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per event loop, the coalescer of each setting: verl's reward-loop worker runs every call on one loop."""


def coalescer_for(url: str, n: int | None, max_wait_s: float, api_key: str | None, timeout: float) -> GroupCoalescer:
    per_loop = _coalescers.setdefault(asyncio.get_running_loop(), {})
    key = (url, n, max_wait_s, api_key, timeout)
    if key not in per_loop:
        per_loop[key] = GroupCoalescer(url, n, max_wait_s, api_key=api_key, timeout=timeout)
    return per_loop[key]


def as_prompt(value: Any) -> Any:
    """verl's `raw_prompt` as /score_groups reads a prompt: a text as it is; chat messages (a list, or a numpy
    array of them as verl's batches hold) as {"role", "content"} objects."""
    if isinstance(value, str):
        return value
    messages = value.tolist() if hasattr(value, "tolist") else value
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ValueError(f"the prompt must be a text or a list of chat messages, got {type(value).__name__}")
    return [{"role": m["role"], "content": m.get("content")} for m in messages]


def result(reward: float, attributes: Attributes) -> float | dict[str, float]:
    """verl's result: the reward, or {"score": reward, **attributes} (verl logs the other keys)."""
    if not math.isfinite(reward):
        raise RewardServerError(200, "the server's reward is not finite (null): the model overflows on this text")
    return reward if attributes is None else {"score": reward, **attributes}


async def compute_score(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: dict[str, Any] | None = None,
    *,
    url: str,
    n: int | None = None,
    max_wait_s: float = MAX_WAIT_S,
    api_key: str | None = None,
    timeout: float = 600.0,
    prompt_key: str = "raw_prompt",
    **kwargs: Any,
) -> float | dict[str, float]:
    """verl's custom reward function: the reward `rm serve` at `url` gives the sample's prompt and response.

    The prompt is `extra_info[prompt_key]` (verl's agent loop puts the chat messages in `raw_prompt`); the
    group id `extra_info["uid"]` where there is one, else the prompt. `n` is the group size (set it to
    `actor_rollout_ref.rollout.n`; without it every group waits `max_wait_s`). `data_source`, `ground_truth` and
    verl's other arguments are not used: the reward model alone gives the reward."""
    info = extra_info or {}
    if prompt_key not in info:
        raise ValueError(
            f"extra_info has no {prompt_key!r} (keys: {sorted(info)}): verl's agent loop adds raw_prompt; "
            "otherwise name the key that holds the prompt with reward_kwargs.prompt_key"
        )
    prompt = as_prompt(info[prompt_key])
    group_id = info.get("uid")
    coalescer = coalescer_for(url, n, max_wait_s, api_key, timeout)
    return result(*await coalescer.reward(str(group_id) if group_id is not None else None, prompt, solution_str))


class RmServeRewardManager:
    """A verl reward manager (`reward.reward_manager.source=importlib`) that scores each sample with `rm serve`,
    grouped by verl's own rollout `uid` and prompt (`raw_prompt`), both read from the sample.

    Settings from `reward.reward_kwargs` (where verl's DAPO manager reads its own): `url`, and optionally
    `max_wait_s`, `api_key`, `timeout`; `n` is `actor_rollout_ref.rollout.n`. The response is decoded as verl's
    naive manager decodes it (its valid tokens, special tokens skipped). verl is imported only by
    `assemble_rm_scores`, which the reward-loop manager calls, so this module still imports without torch."""

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, **kwargs: Any):
        settings = dict(config.reward.get("reward_kwargs") or {})
        if "url" not in settings:
            raise ValueError(
                "set the rm serve URL for RmServeRewardManager: +reward.reward_kwargs.url=http://HOST:PORT"
            )
        self.tokenizer = tokenizer
        self.url = settings["url"]
        self.n = config.actor_rollout_ref.rollout.get("n")
        self.wait = float(settings.get("max_wait_s", MAX_WAIT_S))
        self.api_key, self.timeout = settings.get("api_key"), float(settings.get("timeout", 600.0))

    async def run_single(self, data: Any) -> dict[str, Any]:
        """verl's per-sample call: {"reward_score": reward, "reward_extra_info": {...}} for the last sequence."""
        item = data[-1:][0]
        ids = item.batch["responses"]
        valid = ids[: int(item.batch["attention_mask"][-ids.shape[-1] :].sum())]
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(None, lambda: self.tokenizer.decode(valid, skip_special_tokens=True))
        coalescer = coalescer_for(self.url, self.n, self.wait, self.api_key, self.timeout)
        uid = str(item.non_tensor_batch["uid"])
        reward, attributes = await coalescer.reward(uid, as_prompt(item.non_tensor_batch["raw_prompt"]), text)
        score = result(reward, attributes)
        return {"reward_score": reward, "reward_extra_info": score if isinstance(score, dict) else {"score": score}}

    @classmethod
    def assemble_rm_scores(cls, data: Any, scores: list[float]) -> Any:
        """verl's own: each reward at its response's last valid token."""
        from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

        return RewardManagerBase.assemble_rm_scores.__func__(cls, data, scores)
