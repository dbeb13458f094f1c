"""The clients of a live `python -m rm serve MODEL --ensemble B C` receive the ensemble's chosen reward where they
read a reward (here the conservative one, mean - 0.5 std, so that it differs from every member's and from the
mean): `RewardClient`, `AsyncRewardClient`, TRL's `trl_reward_func` and OpenRLHF's /get_reward, against each
member's `rm score` (1e-5)."""

import asyncio
import json

import httpx
import numpy as np
import pytest
from live_rm_server import rm_serve
from scoring.ensemble_members import export

from rm.cli import main as cli
from rm.client import AsyncRewardClient, RewardClient, trl_reward_func
from rm.data.load import load_pairs

TOL = 1e-5
K = 0.5

pytestmark = pytest.mark.slow  # a server process (seconds to start)


@pytest.fixture(scope="module")
def members(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("client_ensemble")
    return [str(export(tokenizer, root / f"m{i}", seed=i + 1)) for i in range(3)]


@pytest.fixture(scope="module")
def server(members, tmp_path_factory):
    log = tmp_path_factory.mktemp("client-ensemble-serve") / "serve.log"
    args = ("--ensemble", *members[1:], "--ensemble-reward", "conservative", "--uncertainty-k", str(K))
    with rm_serve(members[0], log, *args) as url:
        yield url


def conservative(members, records: list[dict], key: str, folder) -> np.ndarray:
    """mean - K std over the members' `rm score` field `key` of every record."""
    src = folder / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    each = []
    for m, model in enumerate(members):
        out = folder / f"out-{m}.jsonl"
        assert cli(["score", "--model", model, "--input", str(src), "--out", str(out), "--overwrite"]) == 0
        each.append([json.loads(line)[key] for line in out.read_text().splitlines()])
    each = np.array(each, dtype=np.float64)
    return each.mean(axis=0) - K * each.std(axis=0)


def test_every_client_receives_the_chosen_reward(server, members, synthetic_root, tmp_path):
    pairs = load_pairs(str(synthetic_root), "train", [])[:4]
    texts = [p.prompt + p.chosen for p in pairs]
    expected = conservative(members, [{"text": t} for t in texts], "reward", tmp_path)
    groups = [{"prompt": p.prompt, "responses": [p.chosen, p.rejected]} for p in pairs]
    records = [{"prompt": g["prompt"], "responses": [{"text": r} for r in g["responses"]]} for g in groups]
    expected_groups = conservative(members, records, "rewards", tmp_path)

    with RewardClient(server, timeout=30) as c:
        np.testing.assert_allclose(c.score(texts), expected, atol=TOL, rtol=0)
        np.testing.assert_allclose(c.score_groups(groups), expected_groups, atol=TOL, rtol=0)
        assert c.info()["ensemble"]["reward"] == "conservative"

    async def async_groups():
        async with AsyncRewardClient(server, timeout=30) as c:
            return await c.score_groups(groups)

    np.testing.assert_allclose(asyncio.run(async_groups()), expected_groups, atol=TOL, rtol=0)

    reward = trl_reward_func(server)  # TRL's flat lists: each prompt repeated once per completion
    prompts = [g["prompt"] for g in groups for _ in g["responses"]]
    completions = [r for g in groups for r in g["responses"]]
    np.testing.assert_allclose(reward(prompts, completions), expected_groups.reshape(-1), atol=TOL, rtol=0)
    reward.client.close()

    body = httpx.post(f"{server}/get_reward", json={"query": texts, "prompts": texts, "labels": [None] * 4}).json()
    np.testing.assert_allclose(body["rewards"], expected, atol=TOL, rtol=0)
    np.testing.assert_allclose(body["scores"], expected, atol=TOL, rtol=0)
    assert body["extra_logs"]["reward_conservative"] == body["rewards"]
