"""One dealer (rm/collate/shard.py's `deal_rounds`) and one gather (rm/evaluation/gather.py's `gather_once`) under
1, 2 and 3 processes, played by threads whose stand-in accelerator gathers as accelerate does (process by process,
padded to the longest): every value kept exactly once, in place, on every process, every process running as many
forwards, and the rewards of training's eval and of the suites bit for bit those of one process."""

import threading
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.collate.scoring import scored
from rm.collate.shard import EvalBatches, deal_rounds
from rm.evaluation.gather import copy_tags, gather_once, gather_rewards
from rm.suites.score_items import score_all
from rm.tokens.store import EncodedGroup

UNEVEN = [0, 1, 2, 3, 4, 5, 7, 8, 13]
"""Plan lengths: none, fewer batches than processes, multiples of 2 and 3, and plans a round short."""


class Room:
    """What the threads share: one collective at a time, every thread's value seen by all (a barrier each side)."""

    def __init__(self, world: int):
        self.board: list = [None] * world
        self.barrier = threading.Barrier(world, timeout=60)  # a hang guard only: a round trip takes milliseconds

    def share(self, rank: int, value):
        self.board[rank] = value
        self.barrier.wait()
        out = list(self.board)
        self.barrier.wait()
        return out


class Threaded:
    """The part of `accelerate.Accelerator` the scoring paths use, for process `rank` of a `Room`."""

    device = torch.device("cpu")

    def __init__(self, room: Room, rank: int, world: int):
        self.room, self.process_index, self.num_processes = room, rank, world
        self.is_main_process = rank == 0
        self.forwards = 0

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.room.share(self.process_index, t))

    def pad_across_processes(self, t: torch.Tensor, pad_index: int = 0) -> torch.Tensor:
        n = max(self.room.share(self.process_index, len(t)))
        return torch.cat([t, torch.full((n - len(t), *t.shape[1:]), pad_index, dtype=t.dtype)])

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return model


def on_processes(world: int, work: Callable[[Threaded], object]) -> list:
    """`work` run by `world` threads at once, each with its process's accelerator: their results in rank order."""
    room, results, errors = Room(world), [None] * world, []

    def run(rank: int) -> None:
        try:
            results[rank] = work(Threaded(room, rank, world))
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(e)
            room.barrier.abort()

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def uneven_plan(n: int) -> list[list[int]]:
    """`n` batches of 1 to 3 values, the values 0.. in order."""
    sizes = [1 + (3 * b) % 3 + b % 2 for b in range(n)]
    starts = np.cumsum([0, *sizes]).tolist()
    return [list(range(starts[b], starts[b + 1])) for b in range(n)]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("with_cost", [False, True])
def test_deal_rounds_runs_each_batch_once_and_as_many_forwards_everywhere(world, with_cost):
    for n in UNEVEN:
        plan = uneven_plan(n)
        cost = (lambda b: len(b)) if with_cost else None
        shares = [deal_rounds(plan, rank, world, ["filler"], cost) for rank in range(world)]
        assert {len(mine) for mine, _ in shares} == {-(-n // world)}  # DDP and FSDP need the same count
        real = [b for mine, r in shares for b in mine[:r]]
        assert sorted(real) == sorted(plan)  # each batch whole, on one process
        assert all(b == ["filler"] for mine, r in shares for b in mine[r:]) and all(len(m) - r <= 1 for m, r in shares)
        if not with_cost:  # in plan order, round by round: batch k * W + rank
            assert all(mine[:r] == plan[rank::world] for rank, (mine, r) in enumerate(shares))


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("keep_fillers", [False, True])
def test_one_dealer_and_one_gather_keep_every_value_once_in_place_on_every_process(world, keep_fillers):
    """Each value scored as value 10 x index + 0.5; a filler's copies scored -1 and, where gathered, never kept
    (its batch's first copy is on process 0)."""
    for n in UNEVEN:
        plan = uneven_plan(n)
        values = sum(len(b) for b in plan)

        def work(acc: Threaded, plan=plan) -> dict[str, torch.Tensor]:
            mine, real = deal_rounds(plan, acc.process_index, acc.num_processes, plan[0] if plan else [])
            groups, responses, reward, seen = [], [], [], 0
            for k, idx in enumerate(mine):
                if k >= real and not keep_fillers:
                    continue
                copy = copy_tags(acc, seen, len(idx), acc.device)
                seen += len(idx)
                groups.append(torch.stack([torch.tensor(idx, dtype=torch.long), copy], 1))
                responses.append(copy[:, None])
                scored = torch.tensor(idx, dtype=torch.float64) * 10 + 0.5
                reward.append(scored if k < real else torch.full_like(scored, -1.0))
            local = {
                "groups": torch.cat(groups) if groups else torch.empty((0, 2), dtype=torch.long),
                "responses": torch.cat(responses) if responses else torch.empty((0, 1), dtype=torch.long),
                "reward": torch.cat(reward) if reward else torch.empty(0, dtype=torch.float64),
            }
            return gather_once(acc, local, {"responses": ("reward",)})

        for kept in on_processes(world, work):  # the same on every process
            assert kept["groups"][:, 0].tolist() == list(range(values))
            assert Counter(kept["responses"][:, 0].tolist()) == Counter(range(values))  # each exactly once
            placed = torch.empty(values, dtype=torch.float64)
            placed[kept["groups"][kept["responses"][:, 0], 0]] = kept["reward"]
            assert placed.tolist() == [10 * i + 0.5 for i in range(values)]


class WidthReward(torch.nn.Module):
    """Reward = last attended token + 1000 x the batch's width: a reward that tells which batch computed it, as
    a real model's last bits can (other shapes, other kernels)."""

    def __init__(self):
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        last = attention_mask.sum(1) - 1
        return input_ids[torch.arange(len(input_ids)), last].double() + 1000 * input_ids.shape[1]


def width_groups() -> list[EncodedGroup]:
    """Seven pairs, lengths falling then one medium: in batches of 2, [4, 5] is round 0's cheapest batch, so on 3
    processes it is process 2's, and the last round's [6] leaves processes 1 and 2 a filler of pair 5, the shortest:
    process 1's copy of it is tagged before process 2's own."""
    lengths = [9, 9, 6, 6, 3, 2, 6]
    return [
        EncodedGroup(
            [5], [[7] * n + [i], [8] * n + [i]], [0, 1], 0, margin=0.0, index=i, scores=[], pairs=[0, 1, 0], prompt_id=i
        )
        for i, n in enumerate(lengths)
    ]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_training_eval_keeps_each_pairs_reward_from_its_own_batch(world):
    groups = width_groups()

    def work(acc: Threaded) -> dict[str, torch.Tensor]:
        w = acc.num_processes
        batches = EvalBatches(PairBatches(groups, "padded", 2, shuffle=False), acc.process_index, w)
        assert len(batches) == -(-4 // w)  # 4 batches of the plan
        loader = DataLoader(groups, batch_sampler=batches, collate_fn=PaddedCollator(0))
        return gather_rewards(WidthReward(), loader, acc)

    one = on_processes(1, work)[0]
    for many in on_processes(world, work):
        assert many.keys() == one.keys()
        for key, value in one.items():
            assert torch.equal(many[key], value), key


class CountingLayout:
    """A scoring layout whose batch is its responses' last tokens and its rewards those + 1000 x the
    batch's size (which batch computed it shows); it counts forwards per process."""

    def __init__(self, counts: list[int]):
        self.counts = counts

    def collate(self, groups: list[EncodedGroup]) -> dict[str, torch.Tensor]:
        return {"last": torch.tensor([r[-1] for g in groups for r in g.response_ids], dtype=torch.float64)}

    def rewards(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        self.counts.append(1)
        return batch["last"] + 1000 * len(batch["last"])


@pytest.mark.parametrize("world", [1, 2, 3])
def test_suite_scoring_is_one_process_scoring_bit_for_bit(world):
    # 3 prompts of different lengths and responses of 1..4 tokens: batches of 3 cut 11 sequences into 4 (13 into 5).
    for n in (11, 13):
        seqs = [scored([1] * (1 + i % 3), [[2] * (i % 4) + [100 + i]]) for i in range(n)]
        counts: list[list[int]] = [[] for _ in range(world)]

        def work(acc: Threaded, seqs=seqs, counts=counts) -> np.ndarray:
            layout = CountingLayout(counts[acc.process_index])
            return score_all(torch.nn.Identity(), seqs, layout, 3, acc)

        one = score_all(torch.nn.Identity(), seqs, CountingLayout([]), 3, on_processes(1, lambda acc: acc)[0])
        assert (one % 1000).tolist() == [100 + i for i in range(n)]
        for many in on_processes(world, work):
            np.testing.assert_array_equal(many, one)
        assert len({len(c) for c in counts}) == 1  # as many forwards on every process
