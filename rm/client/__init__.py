"""A client of `rm serve` that imports without torch, for a policy's venv.

    from rm.client import RewardClient
    with RewardClient("http://127.0.0.1:8000") as rm:
        rm.score_groups([{"prompt": "\\n\\nHuman: Hi\\n\\nAssistant:", "responses": [" Hello!", " Go away."]}])

This package imports nothing of rm outside itself (it is the lowest layer of scripts/check_layers.py) and needs
only httpx (the `client` extra). Rewards come back as `Rewards`, lists of floats that also carry the model's
attribute outputs (`.attributes`, one {name: value} per text, or None). verl's reward loop calls the server through
`rm.client.verl_rewards` (its `compute_score`, or its reward manager `RmServeRewardManager`).
"""

from rm.client.calls import Rewards
from rm.client.clients import AsyncRewardClient, RewardClient
from rm.client.server_error import RewardRequestError, RewardServerError
from rm.client.trl_rewards import trl_reward_func

__all__ = [
    "AsyncRewardClient",
    "RewardClient",
    "RewardRequestError",
    "RewardServerError",
    "Rewards",
    "trl_reward_func",
]
