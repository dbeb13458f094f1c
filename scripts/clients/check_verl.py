"""verl's own reward-loop code calling a live `rm serve` through rm.client.verl_rewards, compared with `rm score`.

Runs in the verl venv (verl 0.9.1; rm.client from the repository on PYTHONPATH, httpx installed), after
scripts/check_clients.sh has made the exports, their `rm score` references and served.json:

    PYTHONPATH=REPO python scripts/clients/check_verl.py WORK_DIR

Each case of make_exports.py is a rollout group of 2 (its chosen and rejected answers to one prompt, n = 2). Every
sample goes through verl's `RewardLoopWorker.compute_score` (verl/experimental/reward_loop/reward_loop.py), the
call its agent loop makes once per finished rollout, all samples at once and shuffled, with the DataProto built
as the agent loop's `_compute_score` builds it (the sample's fields, `tool_extra_fields` holding `raw_prompt`, the
response's token ids ending in EOS). Two configurations, as a user writes them: the naive reward manager with
`custom_reward_function` = rm.client.verl_rewards.compute_score, and the reward manager
rm.client.verl_rewards.RmServeRewardManager (source importlib), which groups on verl's `uid`.

Stood in for: Ray (the worker is the same class, called in this process instead of as a Ray actor: the agent loop
awaits `worker.compute_score.remote(data)`), vLLM and GPUs (the rollouts are the cases' answers, tokenized with
the export's tokenizer as the policy's). Prints one JSON row per export kind and path, as check_client.py does;
where the server's /info has counters, the row's error says if the samples reached it as more groups than cases.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import traceback
from importlib.metadata import version
from pathlib import Path

import httpx
import numpy as np
import torch
import verl
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_client import KINDS, load, served_url  # noqa: E402

MODULE = "pkg://rm.client.verl_rewards"
PATHS = {
    "RewardLoopWorker.compute_score, naive + compute_score": "function",
    "RewardLoopWorker.compute_score, RmServeRewardManager (uid)": "manager",
}


def config(folder: Path, url: str, how: str):
    """verl's reward config (its own reward.yaml) with the settings a user gives for the adapter."""
    reward = OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "reward" / "reward.yaml")
    cfg = OmegaConf.create({"actor_rollout_ref": {"model": {"path": str(folder), "tokenizer_path": None}}})
    cfg.actor_rollout_ref.rollout = {"n": 2}
    cfg.reward = reward
    if how == "function":
        cfg.reward.custom_reward_function.path = MODULE
        cfg.reward.custom_reward_function.reward_kwargs = {"url": url, "n": 2, "max_wait_s": 30.0}
    else:
        cfg.reward.reward_manager.source = "importlib"
        cfg.reward.reward_manager.name = "RmServeRewardManager"
        cfg.reward.reward_manager.module.path = MODULE
        cfg.reward.reward_kwargs = {"url": url, "max_wait_s": 30.0}
    return cfg


def sample(tok, uid: str, index: int, prompt: list[dict], answer: str) -> DataProto:
    """One finished rollout as verl's agent loop hands it to the reward loop (AgentLoopWorker._compute_score)."""
    rendered = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    prompt_ids = torch.tensor(tok(rendered, add_special_tokens=False)["input_ids"])
    response_ids = torch.tensor(tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    input_ids = torch.cat([prompt_ids, response_ids])
    batch = TensorDict(
        {
            "prompts": prompt_ids[None],
            "responses": response_ids[None],
            "attention_mask": torch.ones_like(input_ids)[None],
            "input_ids": input_ids[None],
            "position_ids": torch.arange(len(input_ids))[None],
        },
        batch_size=1,
    )
    kwargs = {"uid": uid, "raw_prompt": prompt, "data_source": "hh", "reward_model": {"ground_truth": None}}
    kwargs |= {"extra_info": {"index": index}, "index": index, "agent_name": "single_turn_agent"}
    non_tensor = {k: np.array([v]) for k, v in kwargs.items()}
    non_tensor |= {"__num_turns__": np.array([2]), "tool_extra_fields": np.array([{"raw_prompt": prompt}])}
    non_tensor |= {"prompt_len": np.array([len(prompt_ids)]), "response_len": np.array([len(response_ids)])}
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


async def rewards(folder: Path, cases: list[dict], how: str) -> dict[str, list[float]]:
    """Outputs per name (reward, then any attribute verl logs), chosen then rejected per case."""
    worker = RewardLoopWorker(config(folder, served_url(folder), how), None)  # on this loop, as in its actor
    tok = worker.input_tokenizer
    samples = [
        (k, sample(tok, f"uid-{i}", i, c["prompt_messages"], c[f"{side}_message"]["content"]))
        for i, c in enumerate(cases)
        for k, side in ((2 * i, "chosen"), (2 * i + 1, "rejected"))
    ]
    random.Random(0).shuffle(samples)
    got = await asyncio.gather(*(worker.compute_score(data) for _, data in samples))
    out: dict[str, list[float]] = {}
    for _, result in sorted(zip(samples, got, strict=True), key=lambda x: x[0][0]):
        info = {n: v for n, v in result.get("reward_extra_info", {}).items() if n not in ("score", "acc")}
        for name, value in {"reward": result["reward_score"], **info}.items():
            out.setdefault(name, []).append(float(value))
    return out


def groups_seen(url: str) -> int | None:
    return httpx.get(url + "/info").json().get("groups")


def main(work: Path) -> None:
    label = f"verl {version('verl')} (transformers {version('transformers')}) -> rm serve"
    for kind in KINDS:
        folder = work / kind / "export"
        cases, ref = load(work, kind)
        row = {"client": label, "kind": kind, "n": len(ref["reward"])}
        for path, how in PATHS.items():
            try:
                before = groups_seen(served_url(folder))
                got = asyncio.run(rewards(folder, cases, how))
                after = groups_seen(served_url(folder))
            except Exception as e:  # noqa: BLE001 - reported in the table, with the traceback on stderr
                traceback.print_exc()
                print(json.dumps(row | {"path": path, "max_abs_diff": None, "error": f"{type(e).__name__}: {e}"[:200]}))
                continue
            want = {name: ref[name] for name in got if name in ref}
            if set(got) not in ({"reward"}, set(ref)):
                print(json.dumps(row | {"path": path, "max_abs_diff": None, "error": f"outputs {sorted(got)}"}))
                continue
            diffs = {k: max(abs(a - b) for a, b in zip(got[k], want[k], strict=True)) for k in got}
            error = ""
            if before is not None and after - before > len(cases):
                error = f"{len(ref['reward'])} samples reached the server as {after - before} groups, not {len(cases)}"
            print(json.dumps(row | {"path": path, "max_abs_diff": max(diffs.values()), "diffs": diffs, "error": error}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
