"""A client of `rm serve` that imports without torch, for a policy's venv.

    from rm.client import RewardClient
    with RewardClient("http://127.0.0.1:8000") as rm:
        rm.score_groups([{"prompt": "\\n\\nHuman: Hi\\n\\nAssistant:", "responses": [" Hello!", " Go away."]}])

This package imports nothing of rm outside itself (it is the lowest layer of scripts/check_layers.py) and needs
only httpx (the `client` extra).
"""

from rm.client.clients import AsyncRewardClient, RewardClient
from rm.client.server_error import RewardRequestError, RewardServerError
from rm.client.trl_rewards import trl_reward_func

__all__ = ["AsyncRewardClient", "RewardClient", "RewardRequestError", "RewardServerError", "trl_reward_func"]
