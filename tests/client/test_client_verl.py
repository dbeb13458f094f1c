"""verl's per-sample reward calls through rm.client.verl_rewards.compute_score, against `rm serve` on the tiny
export (served in this process, so the test reads the server's counters): 64 concurrent calls, 8 prompts x 8
responses in shuffled order, reach the server as 8 groups with each prompt computed once, and every reward is
`rm score`'s for that prompt and response (1e-5). A group that does not fill is sent after the wait; a group id
never joins different prompts; a server error reaches every caller of its request."""

import asyncio
import json
import random
import subprocess
import sys
import textwrap
import time

import pytest
from in_process_server import served
from live_rm_server import REPO, rm_score

from rm.client import RewardClient, RewardRequestError
from rm.client.verl_rewards import compute_score
from rm.data.load import load_pairs
from rm.model.pretrained import load_reward_model
from rm.tokens.tokenizer import special_prefix

TOL = 1e-5
N = 8
LONG_WAIT = 60.0  # a group that did not fill would hold the test a minute, not pass it


@pytest.fixture(scope="module")
def server(exported_tiny):
    with served(exported_tiny, max_wait_ms=2) as (url, app):
        yield url, app


@pytest.fixture(scope="module")
def rollouts(synthetic_root) -> list[tuple[str, str]]:
    """(prompt, response) x 64: 8 distinct HH prompts, each with 8 answers drawn from the generated pairs."""
    pairs, seen = [], set()
    for p in load_pairs(str(synthetic_root), "train", []):
        if p.prompt not in seen:
            seen.add(p.prompt)
            pairs.append(p)
    answers = [a for p in pairs for a in (p.chosen, p.rejected)]
    return [(p.prompt, answers[(i * N + k) % len(answers)]) for i, p in enumerate(pairs[:N]) for k in range(N)]


def calls(url: str, samples: list[tuple[str, str]], **settings):
    """verl's naive reward manager's call of the custom reward function, one per sample (its `raw_prompt` in
    extra_info, as verl's agent loop puts it there), all awaited concurrently."""

    async def run():
        return await asyncio.gather(
            *(
                compute_score(
                    data_source="hh",
                    solution_str=r,
                    ground_truth=None,
                    extra_info={"raw_prompt": p},
                    url=url,
                    **settings,
                )
                for p, r in samples
            ),
            return_exceptions=True,
        )

    return asyncio.run(run())


def test_64_per_sample_calls_are_8_groups_each_prompt_computed_once(
    server, rollouts, exported_tiny, tokenizer, tmp_path
):
    url, app = server
    shuffled = random.Random(0).sample(rollouts, len(rollouts))
    before = app.state.batcher.counters()
    started = time.monotonic()
    got = calls(url, shuffled, n=N, max_wait_s=LONG_WAIT)
    assert time.monotonic() - started < LONG_WAIT / 2  # each group sent when full, none by the timer
    after = app.state.batcher.counters()
    prompts = list(dict.fromkeys(p for p, _ in rollouts))
    want_tokens = sum(
        len(special_prefix(tokenizer) + tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts
    )
    assert after["groups"] - before["groups"] <= N
    assert after["scored"] - before["scored"] == len(rollouts)
    assert after["prompt_tokens"] - before["prompt_tokens"] == want_tokens
    want = [r["reward"] for r in rm_score(*load_reward_model(str(exported_tiny)), [
        {"prompt": p, "response": r} for p, r in shuffled], tmp_path)]  # fmt: skip
    assert all(isinstance(g, float) for g in got), got
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= TOL


def test_a_group_that_does_not_fill_is_sent_after_the_wait(server, rollouts, exported_tiny, tmp_path):
    url, app = server
    samples = rollouts[:3]  # n says 8: only the wait sends it
    before = app.state.batcher.counters()
    started = time.monotonic()
    got = calls(url, samples, n=N, max_wait_s=0.3)
    assert 0.3 <= time.monotonic() - started < 10
    assert app.state.batcher.counters()["groups"] - before["groups"] == 1
    want = [r["reward"] for r in rm_score(*load_reward_model(str(exported_tiny)), [
        {"prompt": p, "response": r} for p, r in samples], tmp_path)]  # fmt: skip
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= TOL


def test_one_group_id_never_joins_two_prompts(server, rollouts, exported_tiny, tmp_path):
    url, _ = server
    samples = [rollouts[0], rollouts[N]]  # two prompts, one uid
    extra = [{"raw_prompt": p, "uid": "same"} for p, _ in samples]

    async def run():
        return await asyncio.gather(
            *(
                compute_score("hh", r, None, e, url=url, n=2, max_wait_s=0.2)
                for (_, r), e in zip(samples, extra, strict=True)
            )
        )

    got = asyncio.run(run())
    want = [r["reward"] for r in rm_score(*load_reward_model(str(exported_tiny)), [
        {"prompt": p, "response": r} for p, r in samples], tmp_path)]  # fmt: skip
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= TOL


def test_a_server_error_reaches_every_caller_of_the_request(server, rollouts):
    url, _ = server
    prompt = rollouts[0][0]
    got = calls(url, [(prompt, " Fine."), (prompt, "")], n=2, max_wait_s=LONG_WAIT)  # "" cannot be scored: 422
    assert all(isinstance(g, RewardRequestError) and g.status == 422 for g in got), got
    assert "responses[1]" in str(got[0])


def test_no_prompt_is_one_line_naming_the_setting(server):
    with pytest.raises(ValueError, match="prompt_key"):
        asyncio.run(compute_score("hh", "x", None, {"index": 3}, url=server[0]))


def test_imports_and_scores_without_torch(server, rollouts):
    """verl's reward workers have torch, but the adapter must not need it (nor numpy, nor verl): the function works
    with them made unimportable, and its rewards are the server's."""
    url, _ = server
    samples = rollouts[:2]
    code = textwrap.dedent(
        f"""
        import asyncio, importlib.abc, json, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "transformers", "numpy", "verl"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        from rm.client.verl_rewards import compute_score
        async def run():
            return await asyncio.gather(*(
                compute_score("hh", r, None, {{"raw_prompt": p}}, url={url!r}, n=2) for p, r in {samples!r}))
        print(json.dumps(asyncio.run(run())))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    with RewardClient(url) as c:
        want = c.score([p + r for p, r in samples])
    assert max(abs(a - b) for a, b in zip(json.loads(out.stdout), want, strict=True)) <= TOL
