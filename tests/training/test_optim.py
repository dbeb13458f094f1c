"""The optimizer rm trains with: fused AdamW where it can be, the same updates as torch's reference loop."""

import copy

import torch
from accelerate import Accelerator

from rm.training.optim import can_fuse, make_optimizer


def test_fused_adamw_matches_the_single_tensor_loop_and_skips_decay_on_vectors():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 1))
    reference = copy.deepcopy(model)
    accelerator = Accelerator(cpu=True)
    assert can_fuse(model, accelerator)
    ours = make_optimizer(model, accelerator, lr=1e-2, weight_decay=0.1)
    assert ours.defaults["fused"] is True
    # The reference: torch's per-tensor loop, decay written out by hand for the two groups.
    matrices = [p for p in reference.parameters() if p.ndim >= 2]
    vectors = [p for p in reference.parameters() if p.ndim < 2]
    theirs = torch.optim.AdamW(
        [{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}],
        lr=1e-2,
        foreach=False,
    )
    x = torch.randn(64, 16)
    for _ in range(20):
        for net, opt in ((model, ours), (reference, theirs)):
            opt.zero_grad()
            net(x).pow(2).mean().backward()
            opt.step()
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), reference.parameters(), strict=True))
    assert diff <= 1e-5


def test_no_fusing_for_frozen_only_or_integer_parameters():
    accelerator = Accelerator(cpu=True)
    frozen = torch.nn.Linear(4, 4).requires_grad_(False)
    assert not can_fuse(frozen, accelerator)
    model = torch.nn.Linear(4, 4)
    model.register_parameter("steps", torch.nn.Parameter(torch.zeros(2, dtype=torch.long), requires_grad=False))
    assert can_fuse(model, accelerator)  # the frozen integer one is not trained, so not the optimizer's
