"""rm.client against a live `python -m rm serve` on the tiny export: every method returns `rm score`'s rewards
(1e-5) in the caller's order, also when a call is cut at the server's --max-texts; TRL's reward-function shape
regroups by prompt and puts rewards back in call order; server errors arrive as RewardServerError with the
server's line; and the package imports and works in a process where torch cannot be imported.

One server process for the module (its start is most of the time: importing torch and the model)."""

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest
from live_rm_server import REPO, rm_score, rm_serve

from rm.client import AsyncRewardClient, RewardClient, RewardRequestError, RewardServerError, trl_reward_func
from rm.data.formats.hh import parse_turns
from rm.data.load import load_pairs
from rm.model.pretrained import load_reward_model

MAX_TEXTS = 16  # small, so that the calls below are cut into several requests
TOL = 1e-5


@pytest.fixture(scope="module")
def server(exported_tiny, tmp_path_factory):
    log = tmp_path_factory.mktemp("client-serve") / "serve.log"
    with rm_serve(exported_tiny, log, "--max-texts", str(MAX_TEXTS), "--max-wait-ms", "2") as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    with RewardClient(server, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def model(exported_tiny):
    return load_reward_model(str(exported_tiny))


@pytest.fixture(scope="module")
def pairs(synthetic_root):
    """Generated HH pairs: prompts ending in "\\n\\nAssistant:", answers after a space; 12 distinct prompts."""
    seen, out = set(), []
    for p in load_pairs(str(synthetic_root), "train", []):
        if p.prompt not in seen:
            seen.add(p.prompt)
            out.append(p)
    return out[:12]


def messages_of(prompt: str) -> list[dict]:
    roles = {"Human": "user", "Assistant": "assistant"}
    return [{"role": roles[t.role], "content": t.text.strip()} for t in parse_turns(prompt) if t.text.strip()]


def close(got, want):
    assert len(got) == len(want)
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= TOL, (got, want)


@pytest.mark.slow
def test_health_and_info(client):
    assert client.health() == {"status": "ok"}
    info = client.info()
    assert info["max_texts"] == MAX_TEXTS and info["truncation_side"] == "left"


def test_score_equals_rm_score_across_requests(client, model, pairs, tmp_path):
    texts = [p.prompt + r for p in pairs for r in (p.chosen, p.rejected)] + ["no tags at all, one text"]
    assert len(texts) > MAX_TEXTS  # two requests
    want = [r["reward"] for r in rm_score(*model, [{"text": t} for t in texts], tmp_path)]
    close(client.score(texts), want)
    close(client.score(texts[::-1]), want[::-1])
    assert client.score([]) == []


def test_score_groups_keep_request_order(client, model, pairs, tmp_path):
    # Groups of 1 to 5 responses (other prompts' answers too), so requests are cut between groups.
    answers = [a for p in pairs for a in (p.chosen, p.rejected)]
    groups = [{"prompt": p.prompt, "responses": answers[i : i + 1 + i % 5]} for i, p in enumerate(pairs)]
    records = [{"prompt": g["prompt"], "response": r} for g in groups for r in g["responses"]]
    flat = iter(r["reward"] for r in rm_score(*model, records, tmp_path))
    want = [[next(flat) for _ in g["responses"]] for g in groups]
    got = client.score_groups(groups)
    assert [len(g) for g in got] == [len(g) for g in want]
    close(sum(got, []), sum(want, []))
    # reversed groups and responses come back reversed; (prompt, responses) tuples are taken too
    backwards = client.score_groups([(g["prompt"], g["responses"][::-1]) for g in groups[::-1]])
    close(sum(backwards, []), sum([w[::-1] for w in want[::-1]], []))


def test_score_messages_equals_rm_score(client, model, pairs, tmp_path):
    prompts = [messages_of(p.prompt) for p in pairs[:6]]
    answers = [[{"role": "assistant", "content": a.strip()}] for p in pairs[:6] for a in (p.chosen, p.rejected)]
    records = [  # `responses` records (a prompt and K answers), as the server reads a conversation
        {"prompt": prompt, "responses": [{"messages": a} for a in answers[2 * i : 2 * i + 2]]}
        for i, prompt in enumerate(prompts)
    ]
    want = [r for record in rm_score(*model, records, tmp_path) for r in record["rewards"]]
    convos = [prompts[i // 2] + a for i, a in enumerate(answers)]
    close(client.score_messages(convos), want)


def test_trl_reward_func_plain_prompts(server, client, pairs):
    reward = trl_reward_func(server, name="my_rm")
    assert reward.__name__ == "my_rm"
    # As GRPOTrainer calls it: each prompt repeated per generation, here interleaved so grouping must regroup.
    prompts = [p.prompt for _ in range(3) for p in pairs[:5]]
    completions = [pairs[(i * 7) % len(pairs)].chosen for i in range(len(prompts))]
    got = reward(prompts=prompts, completions=completions, completion_ids=[[1]] * len(prompts), trainer_state=None)
    close(got, client.score([p + c for p, c in zip(prompts, completions, strict=True)]))
    reward.client.close()


def test_trl_reward_func_conversational(server, client, pairs):
    reward = trl_reward_func(server)
    assert reward.__name__ == "rm_serve"
    prompts = [messages_of(p.prompt) for _ in range(2) for p in pairs[:6]]
    completions = [[{"role": "assistant", "content": f"Answer number {i}."}] for i in range(len(prompts))]
    got = reward(prompts, completions, answer=["x"] * len(prompts))
    close(got, client.score_messages([p + c for p, c in zip(prompts, completions, strict=True)]))
    reward.client.close()


def test_async_client_matches_sync(server, client, pairs):
    texts = [p.prompt + p.chosen for p in pairs] * 2
    groups = [{"prompt": p.prompt, "responses": [p.chosen, p.rejected]} for p in pairs]

    async def calls():
        async with AsyncRewardClient(server, timeout=30) as c:
            return await asyncio.gather(c.score(texts), c.score_groups(groups), c.health())

    flat, grouped, health = asyncio.run(calls())
    close(flat, client.score(texts))
    close(sum(grouped, []), sum(client.score_groups(groups), []))
    assert health == {"status": "ok"}


def test_server_errors_carry_status_and_message(server, client):
    with pytest.raises(RewardServerError) as e:
        client.score(["fine", "   "])
    assert e.value.status == 422 and "texts[1]" in e.value.message and "\n" not in e.value.message
    with pytest.raises(RewardServerError) as e:  # one group over --max-texts is sent alone; the server says why
        client.score_groups([{"prompt": "p", "responses": ["a"] * (MAX_TEXTS + 1)}])
    assert e.value.status == 413 and "max-texts" in e.value.message
    with pytest.raises(RewardServerError) as e:
        RewardClient("http://127.0.0.1:9", timeout=5).health()  # port 9 (discard): nothing listens
    assert e.value.status is None and not isinstance(e.value, RewardRequestError)


def test_a_lone_surrogate_is_a_client_error_naming_the_text(client):
    """The client cannot send it as UTF-8: it goes escaped, and the server's 400 names the text."""
    with pytest.raises(RewardRequestError) as e:
        client.score(["fine", "broken \ud800 text"])
    assert (e.value.status, e.value.message) == (400, "texts[1] holds a lone surrogate (\\ud800), not text")


@pytest.mark.slow
def test_imports_and_scores_without_torch(server, client, pairs):
    """A policy's venv may have no torch: torch (and transformers) made unimportable, the client still works."""
    prompts = [pairs[0].prompt, pairs[1].prompt, pairs[0].prompt]
    completions = [" Yes.", " No.", " Maybe."]
    code = textwrap.dedent(
        f"""
        import importlib.abc, json, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "transformers", "numpy"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        from rm.client import trl_reward_func
        f = trl_reward_func({server!r})
        print(json.dumps(f({prompts!r}, {completions!r})))
        assert not any(m.split(".")[0] in ("torch", "transformers") for m in sys.modules)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    close(json.loads(out.stdout), client.score([p + c for p, c in zip(prompts, completions, strict=True)]))
