"""Every response of every suite item scored exactly once, on one process or several.

Each item's distinct responses are fitted into `max_length` together with their prompt by rm's one rule
(`rm/tokens/truncation.py`, through `rm.evaluation.score_file.encode_texts`): a prompt that does not fit loses its
oldest turns, then its oldest tokens; a response too long even alone keeps its last tokens (where the reward is
read). So a long text is cut and counted, never dropped: dropping a response would change a best-of-4 result. The
groups are then batched as `rm score` batches them (`rm.collate.scoring.batches`: a prompt's responses stay in one
batch, so a shared-prefix layout computes the prompt once for all of them), and the batches are dealt to the
processes in plan order, W at a time, by rm/collate/shard.py's `deal_rounds` (as training's eval deals its plan).
Every process runs the same number of forwards (one short of a batch scores the first batch again, and drops it), so
a prepared DDP or FSDP model is called alike everywhere; one gather at the end (rm/evaluation/gather.py's
`gather_once`, each response a unit of its own) puts every reward in place on every process.

A stepwise suite's problems (`score_step_problems`, ProcessBench) go the same way: batched as
rm.evaluation.steps.step_scoring's `score_steps` batches them (whole problems, about `batch_size` solutions a
forward), each batch one forward of its `step_outputs` on one process, dealt by `deal_rounds` and gathered once,
each solution a unit whose steps ride along as a linked table.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from rm.collate.scoring import Batch, Layout, batches, responses
from rm.collate.shard import deal_rounds
from rm.errors import DataError, RecordError
from rm.evaluation.eval_report import EvalOptions
from rm.evaluation.gather import copy_tags, gather_once
from rm.evaluation.record_texts import GROUP_KEY, ScoreText
from rm.evaluation.score_file import encode_texts
from rm.evaluation.steps.step_scoring import step_outputs
from rm.model.build import check_positions
from rm.model.pretrained import default_max_length, load_reward_model
from rm.suites.records import SuiteItem
from rm.tokens.steps.step_tokens import StepIds
from rm.tokens.store import EncodedGroup
from rm.tokens.tokenizer import special_prefix


@dataclass
class EncodedItems:
    """The items' texts as groups (training's unit), each distinct response of an item once."""

    groups: list[EncodedGroup]
    slots: list[np.ndarray]
    """Per item, for each of its responses (in its order) the flat index of its response among `groups`'."""

    @property
    def responses(self) -> int:
        return responses(self.groups)

    @property
    def truncated(self) -> int:
        """Texts cut to fit `max_length` (each distinct response of an item counted once)."""
        return sum(len(g.response_ids) for g in self.groups if g.truncated)

    def item_rewards(self, rewards: np.ndarray) -> list[np.ndarray]:
        """Per item, its responses' rewards in its order (a repeated response gets its twin's)."""
        return [rewards[s] for s in self.slots]


@contextlib.contextmanager
def scoring(model: torch.nn.Module) -> Iterator[None]:
    """`model` in eval mode for the block, its own mode back after it."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def progress(mine: list, desc: str, planned: int, accelerator: Accelerator) -> tqdm:
    """This process's batches behind a bar on the main process when there are two or more (redrawn every 10 s
    into a log file)."""
    quiet = not accelerator.is_main_process or planned < 2
    interval = 0.1 if sys.stderr.isatty() else 10.0
    return tqdm(mine, desc, leave=False, unit="batches", disable=quiet, mininterval=interval)


def suite_model(
    model: str, options: EvalOptions, loaded: tuple | None, accelerator: Accelerator
) -> tuple[Any, Any, int]:
    """(reward model on this process's device, tokenizer, max_length) of a suite run: `loaded` as `rm eval` loaded
    them, or loaded here; max_length the caller's, else the model's, checked against its positions."""
    reward_model, tokenizer = loaded or load_reward_model(
        model, options.dtype, options.trust_remote_code, num_threads=options.num_threads
    )
    reward_model.to(accelerator.device)
    max_length = options.max_length or default_max_length(model, reward_model)
    check_positions(max_length, reward_model.hf.config, "--max-length", model)
    return reward_model, tokenizer, max_length


def encode_items(
    items: list[SuiteItem], tokenizer: PreTrainedTokenizerBase, max_length: int, eos: str = "none"
) -> EncodedItems:
    """Each item's distinct responses, tokenized as training tokenizes them (ended as data.eos `eos` ends them: the
    model's, `model_eos`) and fitted with their prompt."""
    prefix = special_prefix(tokenizer)
    groups: list[EncodedGroup] = []
    slots, flat = [], 0
    for item in items:
        distinct = list(dict.fromkeys(item.responses))
        texts = [ScoreText(GROUP_KEY, item.prompt, r, item.turn_starts) for r in distinct]
        try:
            encoded = encode_texts(tokenizer, texts, max_length, prefix, eos)
        except RecordError as e:  # an empty text with no BOS: nothing to read a reward at
            raise DataError(f"{item.origin}: {e.message}") from None
        place = {r: flat + k for k, r in enumerate(distinct)}
        slots.append(np.array([place[r] for r in item.responses], dtype=np.int64))
        groups += encoded
        flat += len(distinct)
    return EncodedItems(groups, slots)


@torch.no_grad()
def score_all(
    model: torch.nn.Module, groups: list[EncodedGroup], layout: Layout, batch_size: int, accelerator: Accelerator
) -> np.ndarray:
    """Rewards of every response of `groups` (float64), group after group, on every process; the model's mode is
    restored."""
    n = responses(groups)
    plan = batches(groups, batch_size)
    mine, real = deal_rounds(
        plan, accelerator.process_index, accelerator.num_processes, plan[0] if plan else Batch([], [])
    )
    device, seen = accelerator.device, 0
    parts: dict[str, list[torch.Tensor]] = {"groups": [], "responses": [], "reward": []}
    with scoring(model):
        for k, batch in enumerate(progress(mine, "suite", len(plan), accelerator)):
            tensors = {name: v.to(device) for name, v in layout.collate(batch.groups).items()}
            rewards = layout.rewards(model, tensors).detach().double()
            if k < real:  # a filler's rewards are dropped: its batch is scored, and kept, on another process
                copy = copy_tags(accelerator, seen, len(batch.rows), device)
                seen += len(batch.rows)
                parts["groups"].append(torch.stack([torch.tensor(batch.rows, device=device), copy], 1))
                parts["responses"].append(copy[:, None])
                parts["reward"].append(rewards)
    empty = {"groups": torch.empty((0, 2), dtype=torch.long), "responses": torch.empty((0, 1), dtype=torch.long)}
    local = {k: torch.cat(v) if v else empty.get(k, torch.empty(0, dtype=torch.float64)) for k, v in parts.items()}
    kept = gather_once(accelerator, {k: v.to(device) for k, v in local.items()}, {"responses": ("reward",)})
    # Each response exactly once (indices 0..n-1), or a suite's numbers would be wrong.
    if not torch.equal(kept["groups"][:, 0], torch.arange(n)) or len(kept["reward"]) != n:
        raise RuntimeError(f"gathered {len(kept['reward'])} rewards for {n} responses")
    out = torch.empty(n, dtype=torch.float64)
    out[kept["responses"][:, 0]] = kept["reward"]  # a response's unit row is its own: the units are 0..n-1
    return out.numpy()


def step_plan(encoded: Sequence[StepIds], batch_size: int) -> list[list[int]]:
    """The problems of each forward, by `score_steps`' rule: whole problems in order, as many as keep the batch
    within `batch_size` solutions (a larger problem alone). A problem none of whose steps fit max_length needs no
    forward and is left out, so that every batch runs one (a prepared FSDP model needs the same count everywhere)."""
    plan: list[list[int]] = []
    size = 0
    for p, e in enumerate(encoded):
        if not any(e.group.step_ends):
            continue
        n = len(e.group.response_ids)
        if not plan or size + n > batch_size:
            plan.append([])
            size = 0
        plan[-1].append(p)
        size += n
    return plan


@torch.no_grad()
def score_step_problems(
    model: torch.nn.Module, encoded: Sequence[StepIds], layout: Layout, batch_size: int, accelerator: Accelerator
) -> list[list[list[float]]]:
    """Per problem, per solution, the head's output at each of its kept steps (`step_outputs`' values), every batch
    run on one process, all of them on every process; the model's mode is restored."""
    first = np.cumsum([0] + [len(e.group.response_ids) for e in encoded])  # each problem's first solution unit
    plan = step_plan(encoded, batch_size)
    mine, real = deal_rounds(plan, accelerator.process_index, accelerator.num_processes, plan[0] if plan else [])
    device, seen = accelerator.device, 0
    parts: dict[str, list[torch.Tensor]] = {"groups": [], "steps": [], "step_value": []}
    with scoring(model):
        for k, batch in enumerate(progress(mine, "steps", len(plan), accelerator)):
            outputs = step_outputs(model, layout, device, [encoded[p] for p in batch])
            if k >= real:  # a filler: its values are kept from its own batch, on another process
                continue
            solutions = [values for per_problem in outputs for values in per_problem]
            units = [int(first[p]) + s for p in batch for s in range(len(encoded[p].group.response_ids))]
            copy = copy_tags(accelerator, seen, len(units), device)
            seen += len(units)
            rows = [(tag, j) for tag, values in zip(copy.tolist(), solutions, strict=True) for j in range(len(values))]
            flat = [v for values in solutions for v in values]
            parts["groups"].append(torch.stack([torch.tensor(units, device=device), copy], 1))
            parts["steps"].append(torch.tensor(rows, dtype=torch.long, device=device).reshape(-1, 2))
            parts["step_value"].append(torch.tensor(flat, dtype=torch.float64, device=device))
    empty = {"groups": torch.empty((0, 2), dtype=torch.long), "steps": torch.empty((0, 2), dtype=torch.long)}
    local = {k: torch.cat(v) if v else empty.get(k, torch.empty(0, dtype=torch.float64)) for k, v in parts.items()}
    kept = gather_once(accelerator, {k: v.to(device) for k, v in local.items()}, {"steps": ("step_value",)})
    planned = sorted(int(first[p]) + s for b in plan for p in b for s in range(len(encoded[p].group.response_ids)))
    if kept["groups"][:, 0].tolist() != planned:  # each planned solution exactly once, or the numbers are wrong
        raise RuntimeError(f"gathered {len(kept['groups'])} solutions for {len(planned)}")
    return placed_steps(encoded, first, kept)


def placed_steps(encoded: Sequence[StepIds], first: np.ndarray, kept: dict[str, torch.Tensor]) -> list:
    """`score_step_problems`' result from the gathered units: each step's value at its solution and position (a
    solution not scored, none of its steps kept, gets [])."""
    out = [[[float("nan")] * len(ends) for ends in e.group.step_ends] for e in encoded]
    units = kept["groups"][:, 0].numpy()
    for (row, position), value in zip(kept["steps"].tolist(), kept["step_value"].tolist(), strict=True):
        p = int(np.searchsorted(first, units[row], side="right")) - 1
        out[p][int(units[row] - first[p])][position] = value
    return out
