"""`trl_reward_func`: a reward model behind `rm serve` as one of TRL's `reward_funcs`.

TRL's GRPOTrainer calls each reward function with the step's flat lists `prompts` and `completions` (each prompt
repeated once per generation) and expects one reward per completion, in that order. Sending those as flat texts
would compute every prompt G times; the function regroups the completions by prompt and sends one /score_groups
request, so the server computes each prompt once, then puts the rewards back in the call's order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rm.client.clients import RewardClient

RewardFunc = Callable[..., list[float]]


def group_by_prompt(prompts: list[Any], completions: list[Any]) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """Groups of the completions that share a prompt (the same text, or the same messages), in order of first
    appearance, and for each completion its (group, position): where its reward comes back."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions: TRL pairs them one to one")
    groups: list[dict[str, Any]] = []
    found: dict[str, int] = {}  # the prompt as JSON -> its group
    places = []
    for prompt, completion in zip(prompts, completions, strict=True):
        key = json.dumps(prompt, sort_keys=True, ensure_ascii=False)  # a text and a message list never collide
        if key not in found:
            found[key] = len(groups)
            groups.append({"prompt": prompt, "responses": []})
        group = groups[found[key]]
        places.append((found[key], len(group["responses"])))
        group["responses"].append(completion)
    return groups, places


def trl_reward_func(url: str, api_key: str | None = None, timeout: float = 60.0, name: str = "rm_serve") -> RewardFunc:
    """A function `(prompts, completions, **kwargs) -> list[float]` for `GRPOTrainer(reward_funcs=[...])`.

    Works for conversational data (prompts as message lists, completions as [{"role": "assistant", "content"}])
    and for plain text (each reward is that of prompt + completion). Other keyword arguments TRL passes
    (dataset columns, `trainer_state`, `completion_ids`) are ignored. `name` is what TRL logs the reward under
    (`rewards/<name>/mean`). The function holds one `RewardClient` (`reward.client`) for the whole run; a
    server error raises `RewardServerError`, which stops the step rather than training on made-up rewards.
    """
    client = RewardClient(url, api_key=api_key, timeout=timeout)

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        groups, places = group_by_prompt(list(prompts), list(completions))
        rewards = client.score_groups(groups)
        return [rewards[g][k] for g, k in places]

    reward.__name__ = reward.__qualname__ = name
    reward.client = client  # type: ignore[attr-defined]
    return reward
