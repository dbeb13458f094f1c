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
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from rm.collate.scoring import Batch, Layout, batches, responses
from rm.collate.shard import deal_rounds
from rm.errors import DataError, RecordError
from rm.evaluation.gather import copy_tags, gather_once
from rm.evaluation.record_texts import GROUP_KEY, ScoreText
from rm.evaluation.score_file import encode_texts
from rm.suites.records import SuiteItem
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


def encode_items(items: list[SuiteItem], tokenizer: PreTrainedTokenizerBase, max_length: int) -> EncodedItems:
    """Each item's distinct responses, tokenized as training tokenizes them and fitted with their prompt."""
    prefix = special_prefix(tokenizer)
    groups: list[EncodedGroup] = []
    slots, flat = [], 0
    for item in items:
        distinct = list(dict.fromkeys(item.responses))
        texts = [ScoreText(GROUP_KEY, item.prompt, r, item.turn_starts) for r in distinct]
        try:
            encoded = encode_texts(tokenizer, texts, max_length, prefix)
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
    was_training = model.training
    model.eval()
    quiet = not accelerator.is_main_process or len(plan) < 2
    interval = 0.1 if sys.stderr.isatty() else 10.0
    try:
        for k, batch in enumerate(
            tqdm(mine, "suite", leave=False, unit="batches", disable=quiet, mininterval=interval)
        ):
            tensors = {name: v.to(device) for name, v in layout.collate(batch.groups).items()}
            rewards = layout.rewards(model, tensors).detach().double()
            if k < real:  # a filler's rewards are dropped: its batch is scored, and kept, on another process
                copy = copy_tags(accelerator, seen, len(batch.rows), device)
                seen += len(batch.rows)
                parts["groups"].append(torch.stack([torch.tensor(batch.rows, device=device), copy], 1))
                parts["responses"].append(copy[:, None])
                parts["reward"].append(rewards)
    finally:
        model.train(was_training)
    empty = {"groups": torch.empty((0, 2), dtype=torch.long), "responses": torch.empty((0, 1), dtype=torch.long)}
    local = {k: torch.cat(v) if v else empty.get(k, torch.empty(0, dtype=torch.float64)) for k, v in parts.items()}
    kept = gather_once(accelerator, {k: v.to(device) for k, v in local.items()}, {"responses": ("reward",)})
    # Each response exactly once (indices 0..n-1), or a suite's numbers would be wrong.
    if not torch.equal(kept["groups"][:, 0], torch.arange(n)) or len(kept["reward"]) != n:
        raise RuntimeError(f"gathered {len(kept['reward'])} rewards for {n} responses")
    out = torch.empty(n, dtype=torch.float64)
    out[kept["responses"][:, 0]] = kept["reward"]  # a response's unit row is its own: the units are 0..n-1
    return out.numpy()
