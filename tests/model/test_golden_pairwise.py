"""Golden values of the pairwise path, bit for bit: rewards, loss, gradients and eval numbers of a fixed tiny model
on fixed pairs, in every layout, as recorded when the group became the encoded unit (issue 24).

K responses per prompt (the next issue) changes the losses and metrics around pairs; a group of two must still
give exactly these numbers. Floats are compared as their hex spelling, so "close" is not enough. One thread,
so a matmul's blocking cannot change a sum's order. To record them again (only where a change is meant to
alter pairwise numbers, saying why in the commit): RM_RECORD_GOLDEN=1 pytest tests/model/test_golden_pairwise.py
"""

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from conftest import random_pairs, tiny_model
from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator
from rm.config.schema import LossConfig
from rm.evaluation.summary import summarize
from rm.model.loss import bradley_terry_loss
from rm.model.objective import preference_loss
from rm.model.reward import RewardModel, group_rewards

GOLDEN = Path(__file__).parent.parent / "fixtures" / "pairwise_golden.json"
COLLATORS = {"shared": SharedCollator(1, 80), "packed": PackedCollator(1, 48), "padded": PaddedCollator(1)}


class Vocabulary:
    """What building a model reads from a tokenizer: a fixed size and ids, so no trained BPE can move them."""

    pad_token_id, eos_token_id = 1, 0

    def __len__(self) -> int:
        return 96


def hexes(t: torch.Tensor) -> list[str]:
    return [float(x).hex() for x in t.detach().double().flatten().tolist()]


def gradient_digest(model: torch.nn.Module) -> str:
    """sha256 of every parameter's gradient bytes, by name: any changed bit changes it."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(p.grad.detach().contiguous().numpy().tobytes() if p.grad is not None else b"none")
    return h.hexdigest()


def measure(layout: str, arch: str) -> dict:
    torch.manual_seed(0)
    model = RewardModel(tiny_model(Vocabulary(), arch, seed=3)).train()
    model.hf.config.attention_dropout = 0.0
    pairs = random_pairs(96, 10, seed=7)
    batch = COLLATORS[layout](pairs)
    r = group_rewards(model, batch)
    chosen, rejected = r[batch["better"]], r[batch["worse"]]
    pairwise = bradley_terry_loss(chosen, rejected, batch["margin"], center_rewards_coef=0.01, reduction="sum")
    # The loop's objective (issue 25: groups, weights, ties) on a batch of pairs: the same loss to the last bit.
    for weighting in ("group", "pair"):
        cfg = LossConfig(use_margin=True, center_rewards_coef=0.01, group_weighting=weighting)
        loss, weight = preference_loss(cfg, r, batch)
        assert float(loss).hex() == float(pairwise).hex() and int(weight) == len(chosen)
    model.zero_grad()
    loss.backward()
    summary = summarize(chosen.detach(), rejected.detach())
    return {
        "chosen": hexes(chosen),
        "rejected": hexes(rejected),
        "loss": float(loss).hex(),
        "gradients": gradient_digest(model),
        "eval": {k: (float(v).hex() if isinstance(v, float) else v) for k, v in sorted(summary.items())},
    }


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CASES = [(layout, arch) for layout in COLLATORS for arch in ("llama", "gpt_neox")]


def test_pairwise_results_are_the_recorded_ones_bit_for_bit(one_thread):
    got = {f"{layout}/{arch}": measure(layout, arch) for layout, arch in CASES}
    if os.environ.get("RM_RECORD_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert got.keys() == want.keys()
    for case in want:
        assert got[case] == want[case], case
