"""Golden values of the pairwise path: rewards, loss, gradients and eval numbers of a fixed tiny model on fixed
pairs, in every layout, as recorded when the group became the encoded unit.

K responses per prompt changes the losses and metrics around pairs; a group of two must still give
these numbers. They were first compared bit for bit, which held on the machine that recorded them and broke on
the next one: another CPU's kernels move the last bits (measured: rewards and eval numbers within 1.1e-5
relative, every gradient's bytes different, every case alike). So floats are compared to `REL` relative, ten
times that drift and far below what a changed rule moves (a margin left out, a mean for a sum: 1e-2 and more),
and gradients by each parameter's gradient norm, not their bytes. Within one run the loop's objective must
still equal the plain Bradley-Terry loss to the last bit (`measure`). One thread. To record them again (only
where a change is meant to alter pairwise numbers, saying why in the commit):
RM_RECORD_GOLDEN=1 pytest tests/model/test_golden_pairwise.py
"""

import json
import math
import os
from pathlib import Path

import pytest
import torch

from conftest import random_pairs, tiny_model
from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator
from rm.config.schema import LossConfig
from rm.evaluation.summary import summarize
from rm.model.group_loss import bradley_terry_loss
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


REL = 1e-4


def gradient_norms(model: torch.nn.Module) -> dict[str, str | None]:
    """Each parameter's gradient norm, by name (None: no gradient)."""
    return {
        name: float(p.grad.double().norm()).hex() if p.grad is not None else None
        for name, p in sorted(model.named_parameters())
    }


def floats_close(got, want, where: str = "") -> None:
    """The same structure, hex floats within `REL` of each other (relative, with an absolute floor of 1e-9)."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for k in want:
            floats_close(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            floats_close(g, w, f"{where}[{i}]")
    elif isinstance(want, str):
        g, w = float.fromhex(got), float.fromhex(want)
        assert math.isclose(g, w, rel_tol=REL, abs_tol=1e-9), f"{where}: {g!r} != {w!r}"
    else:
        assert got == want, where


def measure(layout: str, arch: str) -> dict:
    torch.manual_seed(0)
    model = RewardModel(tiny_model(Vocabulary(), arch, seed=3)).train()
    model.hf.config.attention_dropout = 0.0
    pairs = random_pairs(96, 10, seed=7)
    batch = COLLATORS[layout](pairs)
    r = group_rewards(model, batch)
    chosen, rejected = r[batch["better"]], r[batch["worse"]]
    pairwise = bradley_terry_loss(chosen, rejected, batch["margin"], center_rewards_coef=0.01, reduction="sum")
    # The loop's objective (groups, weights, ties) on a batch of pairs: the same loss to the last bit.
    for weighting in ("group", "pair"):
        cfg = LossConfig(use_margin=True, center_rewards_coef=0.01, group_weighting=weighting)
        loss, weight = preference_loss(cfg, r, batch)
        assert float(loss.detach()).hex() == float(pairwise.detach()).hex() and int(weight) == len(chosen)
    model.zero_grad()
    loss.backward()
    summary = summarize(chosen.detach(), rejected.detach())
    return {
        "chosen": hexes(chosen),
        "rejected": hexes(rejected),
        "loss": float(loss).hex(),
        "gradient_norms": gradient_norms(model),
        "eval": {k: (float(v).hex() if isinstance(v, float) else v) for k, v in sorted(summary.items())},
    }


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CASES = [(layout, arch) for layout in COLLATORS for arch in ("llama", "gpt_neox")]


def test_pairwise_results_are_the_recorded_ones(one_thread):
    got = {f"{layout}/{arch}": measure(layout, arch) for layout, arch in CASES}
    if os.environ.get("RM_RECORD_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert got.keys() == want.keys()
    for case in want:
        floats_close(got[case], want[case], case)
