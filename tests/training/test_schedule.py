"""rm's learning-rate schedules give transformers' `get_scheduler` multipliers step by step (rm writes them itself
so that a training process does not import transformers.optimization and, through it, peft), and a checkpointed
schedule resumes where it was."""

import pytest
import torch
from transformers import get_scheduler

from rm.training.optim import make_scheduler

KINDS = ["linear", "cosine", "constant_with_warmup"]


def optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("warmup", "total"), [(0, 10), (3, 10), (10, 10), (4, 1)])
def test_every_step_equals_transformers(kind, warmup, total):
    ours, theirs = optimizer(), optimizer()
    mine = make_scheduler(ours, kind, warmup, total)
    reference = get_scheduler(kind, theirs, num_warmup_steps=warmup, num_training_steps=total)
    for _ in range(total + 3):  # past the end too: linear and cosine stay at 0
        assert ours.param_groups[0]["lr"] == theirs.param_groups[0]["lr"]
        ours.step()
        theirs.step()
        mine.step()
        reference.step()


def test_a_resumed_schedule_continues_where_it_stopped():
    first = optimizer()
    scheduler = make_scheduler(first, "cosine", 2, 12)
    for _ in range(5):
        first.step()
        scheduler.step()
    resumed_opt = optimizer()
    resumed = make_scheduler(resumed_opt, "cosine", 2, 12)
    resumed.load_state_dict(scheduler.state_dict())
    resumed_opt.param_groups[0]["lr"] = resumed.get_last_lr()[0]
    for _ in range(4):
        first.step()
        scheduler.step()
        resumed_opt.step()
        resumed.step()
        assert resumed_opt.param_groups[0]["lr"] == first.param_groups[0]["lr"]


def test_an_unknown_schedule_is_refused_at_once():
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        make_scheduler(optimizer(), "polynomial", 1, 10)
