"""The end-of-sequence convention through TRL's RewardTrainer and OpenRLHF's local reward model (their own code).

Runs inside the client's venv (rm is not installed there), on CPU, float32, on what scripts/clients/eos_exports.py
wrote (real HH pairs, and rm's token ids, rewards and accuracy for the exports `random` = data.eos none, `eos` and
`space-eos`):

    python eos_checks.py trl WORK_DIR        # or: openrlhf

Prints one JSON line per export and path, with "eos_check": true: {"client", "kind", "eos", "path", "n", "ids_equal",
"accuracy", "rm_accuracy", "max_abs_diff", "expect", "error"}. `expect` is "equal" where the path feeds the model
the convention it was trained with (the row fails unless every id, the accuracy and every reward within 1e-5 are
rm's), and "differs" elsewhere: the measured mismatch, reported.

- trl: RewardTrainer(model=EXPORT_PATH) given rm's plain-text pairs (explicit prompt): its own dataset preparation
  (the EOS token appended, then tokenized), collator and model; its `evaluate()`'s eval_accuracy, its prepared ids,
  the rewards of its eval batches; then `train()` for TRAIN_STEPS steps (finite losses). Expected equal: `eos`.
- openrlhf: get_llm_for_sequence_regression(EXPORT, "reward") on two inputs. Its RewardDataset (what its reward
  model trainer feeds: " " + EOS after each text, left padded), expected equal for `space-eos`; and PPO sequences as
  its rollouts build them (SingleTurnAgentExecutor.execute with a stand-in engine whose generation is the answer's
  ids then EOS; SamplesGenerator._process_response_into_experience; Experience.concat_experiences, right padded;
  the reward read at the last attended token, the EOS), against `rm score` of the text they decode to (the answer
  ending with EOS, which rm does not double: equal for every export) and against rm's own rendering of the pair
  (equal for `eos`: PPO puts no space before the EOS).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import tempfile
import traceback
import types
from pathlib import Path
from types import SimpleNamespace

import torch

KINDS = ("random", "eos", "space-eos")
TRAIN_STEPS = 3
BATCH = 10
"""Pairs per eval batch: 150 pairs in equal batches, so TRL's mean of per-batch accuracies is the accuracy."""


def load(work: Path, kind: str) -> tuple[list[dict], dict]:
    pairs = [json.loads(line) for line in (work / "eos-checks" / "trl_pairs.jsonl").read_text().splitlines()]
    return pairs, json.loads((work / "eos-checks" / kind / "ref.json").read_text())


def interleaved(chosen: list, rejected: list) -> list:
    return [x for pair in zip(chosen, rejected, strict=True) for x in pair]


def accuracy_of(rewards: list[float]) -> float:
    """Pairs whose chosen text scores higher, as TRL and OpenRLHF count them (a tie counts nothing)."""
    return sum(c > r for c, r in zip(rewards[::2], rewards[1::2], strict=True)) / (len(rewards) // 2)


def compared(got: dict, ref: dict, rewards: str = "rewards", ids: str = "ids") -> dict:
    """ids_equal, accuracy and max_abs_diff of a path's texts against rm's (`ref[rewards]`, `ref[ids]`)."""
    diff = max(abs(a - b) for a, b in zip(got["rewards"], ref[rewards], strict=True))
    return {
        "n": len(got["rewards"]),
        "ids_equal": sum(a == b for a, b in zip(got["ids"], ref[ids], strict=True)),
        "accuracy": got.get("accuracy", accuracy_of(got["rewards"])),
        "rm_accuracy": ref["accuracy"] if rewards == "rewards" else accuracy_of(ref[rewards]),
        "max_abs_diff": diff,
    }


def trl(folder: Path, pairs: list[dict], ref: dict) -> dict[str, dict]:
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    args = RewardConfig(
        output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], bf16=False, seed=0, logging_steps=1,
        per_device_eval_batch_size=BATCH, per_device_train_batch_size=8, max_steps=TRAIN_STEPS, learning_rate=1e-5,
        save_strategy="no",
    )  # fmt: skip
    data = Dataset.from_list(pairs)
    trainer = RewardTrainer(model=str(folder), args=args, train_dataset=data, eval_dataset=data)
    ids = interleaved(trainer.eval_dataset["chosen_ids"], trainer.eval_dataset["rejected_ids"])
    rewards = []
    model = trainer.model.eval()
    with torch.no_grad():
        for batch in trainer.get_eval_dataloader():  # chosen rows, then rejected rows (DataCollatorForPreference)
            chosen, rejected = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, 0].chunk(2)
            rewards += interleaved(chosen.tolist(), rejected.tolist())
    metrics = trainer.evaluate()
    got = {"ids": ids, "rewards": rewards, "accuracy": metrics["eval_accuracy"]}
    row = compared(got, ref) | {"expect": "equal" if ref["eos"] == "eos" else "differs"}
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    train = {"train_losses": losses, "expect": "equal" if ref["eos"] == "eos" else "differs"}
    if len(losses) != TRAIN_STEPS or not all(math.isfinite(x) for x in losses):
        train["error"] = f"train() for {TRAIN_STEPS} steps logged losses {losses}"
    return {"RewardTrainer.evaluate, plain-text pairs": row, f"RewardTrainer.train, {TRAIN_STEPS} steps": train}


def reward_dataset(tok, pairs: list[dict]):
    """OpenRLHF's RewardDataset over `pairs` (plain text, prompt_key "prompt"), built without `datasets`: its own
    process_data, __getitem__ (" " + EOS, its truncation rule) and collate_fn (left padding)."""
    from openrlhf.datasets.reward_dataset import RewardDataset

    keys = SimpleNamespace(prompt_key="prompt", chosen_key="chosen", rejected_key="rejected", apply_chat_template=False)
    ds = RewardDataset.__new__(RewardDataset)
    ds.is_dpo, ds.tokenizer, ds.max_length, ds.input_template = False, tok, 1024, None
    ds.strategy = SimpleNamespace(args=SimpleNamespace(data=keys))
    ds.prompt_key, ds.chosen_key, ds.rejected_key, ds.apply_chat_template = "prompt", "chosen", "rejected", False
    rows = [ds.process_data(p) for p in pairs]
    ds.prompts, ds.chosens = [r["prompt"] for r in rows], [r["chosen"] for r in rows]
    ds.rejects, ds.extras = [r["reject"] for r in rows], [r["extra"] for r in rows]
    return ds


def unpadded(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]


def openrlhf_dataset(model, tok, pairs: list[dict]) -> dict:
    ds = reward_dataset(tok, pairs)
    ids, rewards = [], []
    with torch.no_grad():
        for start in range(0, len(ds), BATCH):
            c_ids, c_mask, r_ids, r_mask, _ = ds.collate_fn([ds[i] for i in range(start, min(start + BATCH, len(ds)))])
            c_ids, r_ids = c_ids.squeeze(1), r_ids.squeeze(1)  # as its RewardModelTrainer does
            ids += interleaved(unpadded(c_ids, c_mask), unpadded(r_ids, r_mask))
            rewards += interleaved(model(c_ids, c_mask).tolist(), model(r_ids, r_mask).tolist())
    return {"ids": ids, "rewards": rewards}


def ppo_imports():
    """SamplesGenerator (its module imports ray, vllm and the vLLM engine helpers at the top; none runs here: stand-in
    modules while it is imported), Experience and SingleTurnAgentExecutor."""
    stubs = {"ray": {}, "vllm": {"SamplingParams": object}, "openrlhf.trainer.ray": {},
             "openrlhf.trainer.ray.vllm_engine": {"batch_vllm_engine_call": None}}  # fmt: skip
    saved = {name: sys.modules.get(name) for name in stubs}
    for name, attrs in stubs.items():
        sys.modules[name] = types.ModuleType(name)
        for attr, value in attrs.items():
            setattr(sys.modules[name], attr, value)
    try:
        from openrlhf.trainer.ppo_utils.experience import Experience
        from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    finally:
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    return SamplesGenerator, Experience, SingleTurnAgentExecutor


def ppo_sequences(tok, pairs: list[dict]) -> tuple[list, list[str]]:
    """Experiences (one per text: chosen, rejected, ...) as OpenRLHF's rollout makes them, and their decoded texts."""
    SamplesGenerator, _, SingleTurnAgentExecutor = ppo_imports()
    executor = SingleTurnAgentExecutor()  # no remote reward: the local reward model scores the sequences
    params = SimpleNamespace(max_tokens=1024, logprobs=None)

    class Engine:  # stand-in for vLLM: the "generation" is the answer's ids, ended by EOS as a stopped one is
        def __init__(self, answer: str):
            self.ids = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

        async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
            return SimpleNamespace(outputs=[SimpleNamespace(token_ids=self.ids, finish_reason="stop", logprobs=None)])

    async def rollouts() -> list[dict]:
        runs = [executor.execute(p["prompt"], None, params, 2048, tok, Engine(p[k])) for p in pairs
                for k in ("chosen", "rejected")]  # fmt: skip
        return await asyncio.gather(*runs)

    outputs = asyncio.run(rollouts())
    experiences = [SamplesGenerator._process_response_into_experience(None, o, max_len=2048) for o in outputs]
    texts = [tok.decode(o["observation_tokens"], skip_special_tokens=False) for o in outputs]
    return experiences, texts


def openrlhf_ppo(model, tok, pairs: list[dict], ref: dict) -> dict:
    _, Experience, _ = ppo_imports()
    experiences, texts = ppo_sequences(tok, pairs)
    wanted = [p["prompt"] + p[k] + ref["eos_token"] for p in pairs for k in ("chosen", "rejected")]
    if texts != wanted:
        bad = next(i for i, (a, b) in enumerate(zip(texts, wanted, strict=True)) if a != b)
        return {"error": f"text {bad}: the PPO sequence decodes to {texts[bad][-40:]!r}, not {wanted[bad][-40:]!r}"}
    ids, rewards = [], []
    with torch.no_grad():
        for start in range(0, len(experiences), 2 * BATCH):
            batch = Experience.concat_experiences(experiences[start : start + 2 * BATCH], tok.pad_token_id)
            ids += unpadded(batch.sequences, batch.attention_mask)
            rewards += model(batch.sequences, batch.attention_mask, pad_sequence=True).tolist()
    return {"ids": ids, "rewards": rewards}


def openrlhf(folder: Path, pairs: list[dict], ref: dict) -> dict[str, dict]:
    from check_client import openrlhf_model_factory
    from transformers import AutoTokenizer

    factory = openrlhf_model_factory()
    model = factory(str(folder), "reward", param_dtype="fp32", attn_implementation="sdpa").eval()
    tok = AutoTokenizer.from_pretrained(folder)
    out = {"RewardDataset (its RM trainer's input)": compared(openrlhf_dataset(model, tok, pairs), ref)}
    out["RewardDataset (its RM trainer's input)"]["expect"] = "equal" if ref["eos"] == "space_eos" else "differs"
    ppo = openrlhf_ppo(model, tok, pairs, ref)
    if "error" in ppo:
        return out | {"PPO sequences": ppo}
    out["PPO sequences vs rm score of their text"] = compared(ppo, ref, "ppo_rewards", "ppo_ids") | {"expect": "equal"}
    expect = "equal" if ref["eos"] == "eos" else "differs"  # PPO puts no space before the EOS
    out["PPO sequences vs rm's rendering"] = compared(ppo, ref) | {"expect": expect}
    return out


CLIENTS = {"trl": trl, "openrlhf": openrlhf}


def main(client: str, work: Path) -> None:
    from importlib.metadata import version

    label = f"{client} {version(client)} (transformers {version('transformers')})"
    for kind in KINDS:
        pairs, ref = load(work, kind)
        row = {"client": label, "kind": kind, "eos": ref["eos"], "eos_check": True}
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its logs: stdout is for the rows
                results = CLIENTS[client](work / kind / "export", pairs, ref)
        except Exception as e:  # noqa: BLE001 - reported in the table, with the traceback on stderr
            traceback.print_exc()
            print(json.dumps(row | {"path": "-", "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
            continue
        for path, result in results.items():
            print(json.dumps(row | {"path": path, "error": ""} | result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
