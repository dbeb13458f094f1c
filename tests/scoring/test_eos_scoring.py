"""A model trained with an EOS ending each response (data.eos) gets the same reward for a pair from training's
forward, `rm score`, `rm eval`, `rm serve`'s /score and /get_reward and `rm.load(...).score`, and that reward is
plain transformers' on the string TRL's or OpenRLHF's reward dataset would tokenize (the EOS text included):
1e-5. A served text already ending with EOS (a PPO rollout, decoded with its EOS and padding) gets no second."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from starlette.testclient import TestClient
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification

import rm
from conftest import tiny_model
from rm.cli import main as cli_main
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.collate.shard import EvalBatches
from rm.config import RunConfig
from rm.data.load import load_pairs
from rm.evaluation.gather import gather_rewards
from rm.export.folder import Weights, export_model
from rm.model.pretrained import load_reward_model
from rm.serve.app import build_app
from rm.serve.scorer import load_scorer
from rm.serve.serve_config import ServeConfig
from rm.tokens.encode import encode_kept

pytestmark = pytest.mark.slow  # models end to end, several entry points (seconds)


@pytest.fixture(scope="module", params=["eos", "space_eos"])
def case(request, tokenizer, synthetic_root, tmp_path_factory):
    """(eos, export, pairs file, the pairs): a tiny model exported with the convention, 6 synthetic HH pairs."""
    eos, root = request.param, tmp_path_factory.mktemp(f"eos-{request.param}")
    cfg = RunConfig()
    cfg = replace(cfg, data=replace(cfg.data, eos=eos))
    export = export_model(tiny_model(tokenizer, seed=5), tokenizer, root / "export", cfg, Weights(None, None))
    pairs = load_pairs(str(synthetic_root), "test", [])[:6]
    data = root / "pairs.jsonl"
    data.write_text("".join(json.dumps({"chosen": p.prompt + p.chosen, "rejected": p.prompt + p.rejected}) + "\n"
                            for p in pairs))  # fmt: skip
    return eos, export, data, pairs


def tools_rewards(eos, export, pairs) -> list[float]:
    """Plain transformers on the tool's own string, tokenized whole: TRL's `prompt + response + eos_token`,
    OpenRLHF's `(prompt + response).rstrip("\\n") + " " + eos_token`."""
    model = AutoModelForSequenceClassification.from_pretrained(export).eval()
    _, tok = load_reward_model(str(export))
    out = []
    for p in pairs:
        for r in (p.chosen, p.rejected):
            text = (p.prompt + r).rstrip("\n") + " " if eos == "space_eos" else p.prompt + r
            ids = tok(text + tok.eos_token, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                out.append(model(input_ids=torch.tensor([ids])).logits[0, 0].item())
    return out


def training_forward(eos, export, pairs) -> list[float]:
    """Training's encoder (with the run's data.eos), eval plan, collator and gather."""
    model, tok = load_reward_model(str(export))
    encoded, _, _ = encode_kept(pairs, tok, 512, sorted({p.subset for p in pairs}), eos=eos)
    plan = PairBatches(encoded, "padded", 16, 0, False, 0)
    loader = DataLoader(encoded, batch_sampler=EvalBatches(plan, 0, 1), collate_fn=PaddedCollator(tok.pad_token_id))
    rewards = gather_rewards(model, loader, Accelerator(cpu=True))["reward"].reshape(-1, 2)
    return rewards.flatten().tolist()  # chosen, rejected of each pair, in order (one process, one batch)


def rm_score(export, data, tmp_path) -> list[float]:
    out = tmp_path / "scored.jsonl"
    assert cli_main(["score", "--model", str(export), "--input", str(data), "--out", str(out), "--overwrite"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [v for r in rows for v in (r["chosen_reward"], r["rejected_reward"])]


def rm_eval(export, data, tmp_path) -> list[float]:
    out = tmp_path / "eval"
    args = ["eval", "--model", str(export), "--data", str(data), "--out", str(out), "--bootstrap-samples", "10"]
    assert cli_main(args) == 0
    rows = [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]
    return [v for r in rows for v in (r["chosen_reward"], r["rejected_reward"])]


def served(export, pairs) -> dict[str, list[float]]:
    scorer = load_scorer(str(export), device="cpu", dtype="float32", trust_remote_code=False, max_length=0,
                         normalize=False, num_threads=1)  # fmt: skip
    tok = scorer.tokenizer
    texts = [p.prompt + r for p in pairs for r in (p.chosen, p.rejected)]
    app = build_app(scorer, ServeConfig(model=scorer.name), None)
    with TestClient(app, base_url="http://localhost") as c:
        plain = c.post("/score", json={"texts": texts})
        ended = c.post("/score", json={"texts": [t + tok.eos_token for t in texts]})  # already ends with EOS
        rollouts = c.post("/get_reward", json={"query": [t + tok.eos_token + tok.pad_token * 2 for t in texts]})
    assert plain.status_code == ended.status_code == rollouts.status_code == 200, plain.text
    return {"/score": plain.json()["rewards"], "/score ending with EOS": ended.json()["rewards"],
            "/get_reward rollouts": rollouts.json()["rewards"]}  # fmt: skip


def test_every_entry_point_gives_training_and_the_tools_reward(case, tmp_path):
    eos, export, data, pairs = case
    expected = np.array(training_forward(eos, export, pairs))
    records = [json.loads(line) for line in data.read_text().splitlines()]
    got = {
        "the tool's string": tools_rewards(eos, export, pairs),
        "rm score": rm_score(export, data, tmp_path),
        "rm eval": rm_eval(export, data, tmp_path),
        "rm.load().score": [v for f in rm.load(str(export)).score(records) for v in f.values()],
        **served(export, pairs),
    }
    if eos == "space_eos":  # a rollout ending with EOS is read as the policy ended it: no space before the EOS
        del got["/score ending with EOS"], got["/get_reward rollouts"]
    wrong = {k: v for k, v in got.items() if not np.allclose(v, expected, atol=1e-5, rtol=0)}
    assert not wrong, f"training's forward: {expected.tolist()}; these differ: {wrong}"


def test_a_rollout_ending_with_eos_is_read_as_it_ended(case):
    """space_eos: "answer<EOS>" (a PPO rollout) keeps its ids, no space is added; with the space written out it is
    the trained text. Both score what plain transformers scores on those very ids."""
    eos, export, _, pairs = case
    got = served(export, pairs)
    np.testing.assert_allclose(got["/get_reward rollouts"], got["/score ending with EOS"], atol=1e-5, rtol=0)
    if eos == "eos":
        np.testing.assert_allclose(got["/score ending with EOS"], got["/score"], atol=1e-5, rtol=0)
    else:  # one token less: another reward, but the rollout's own
        assert not np.allclose(got["/score ending with EOS"], got["/score"], atol=1e-5, rtol=0)
