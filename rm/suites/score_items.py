"""Every response of every suite item scored exactly once, on one process or several.

Each item's distinct responses are fitted into `max_length` together with their prompt by rm's one rule
(`rm/tokens/truncation.py`, through `rm.evaluation.score_file.encode_texts`): a prompt that does not fit loses
its oldest turns, then its oldest tokens; a response too long even alone keeps its last tokens (where the
reward is read). So a long text is cut and counted, never dropped: dropping a response would change a best-of-4
result. The texts are then sorted and batched as `rm score` batches them (`score_file.batches`: one prompt's
responses stay in one batch, so a shared-prefix layout computes the prompt once for all of them), and the
batches are dealt round-robin to the processes. Every process runs the same number of forwards (one short of a
batch scores the first batch again, and drops it), so a prepared DDP or FSDP model is called alike everywhere;
one gather at the end puts every reward in place on every process.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from rm.collate.scoring import Layout, ScoreSeq
from rm.errors import DataError, RecordError
from rm.evaluation.record_texts import GROUP_KEY, ScoreText
from rm.evaluation.score_file import batches, encode_texts, scoring_order
from rm.suites.records import SuiteItem
from rm.tokens.tokenizer import special_prefix


@dataclass
class EncodedItems:
    """The items' texts as token ids, each distinct response of an item once."""

    seqs: list[ScoreSeq]
    slots: list[np.ndarray]
    """Per item, for each of its responses (in its order) the index of its sequence in `seqs`."""

    @property
    def truncated(self) -> int:
        """Conversations cut to fit `max_length` (each distinct response of an item counted once)."""
        return sum(s.truncated for s in self.seqs)

    def item_rewards(self, rewards: np.ndarray) -> list[np.ndarray]:
        """Per item, its responses' rewards in its order (a repeated response gets its twin's)."""
        return [rewards[s] for s in self.slots]


def encode_items(items: list[SuiteItem], tokenizer: PreTrainedTokenizerBase, max_length: int) -> EncodedItems:
    """Each item's distinct responses, tokenized as training tokenizes them and fitted with their prompt."""
    prefix = special_prefix(tokenizer)
    seqs: list[ScoreSeq] = []
    slots = []
    for item in items:
        distinct = list(dict.fromkeys(item.responses))
        texts = [ScoreText(GROUP_KEY, item.prompt, r, item.turn_starts) for r in distinct]
        try:
            encoded = encode_texts(tokenizer, texts, max_length, prefix)
        except RecordError as e:  # an empty text with no BOS: nothing to read a reward at
            raise DataError(f"{item.origin}: {e.message}") from None
        place = {r: len(seqs) + k for k, r in enumerate(distinct)}
        slots.append(np.array([place[r] for r in item.responses], dtype=np.int64))
        seqs += encoded
    return EncodedItems(seqs, slots)


@torch.no_grad()
def score_all(
    model: torch.nn.Module, seqs: list[ScoreSeq], layout: Layout, batch_size: int, accelerator: Accelerator
) -> np.ndarray:
    """Rewards [len(seqs)] (float64) in the order given, on every process; the model's mode is restored."""
    plan = batches(seqs, scoring_order(seqs), batch_size)
    rank, world = accelerator.process_index, accelerator.num_processes
    rounds = -(-len(plan) // world)
    local = torch.zeros(len(seqs), dtype=torch.float64)
    was_training = model.training
    model.eval()
    quiet = not accelerator.is_main_process or len(plan) < 2
    interval = 0.1 if sys.stderr.isatty() else 10.0
    try:
        for k in tqdm(range(rounds), "suite", leave=False, unit="batches", disable=quiet, mininterval=interval):
            b = k * world + rank
            idx = plan[b] if b < len(plan) else plan[0]
            batch = {n: v.to(accelerator.device) for n, v in layout.collate([seqs[i] for i in idx]).items()}
            rewards = layout.rewards(model, batch).detach().double().cpu()
            if b < len(plan):
                local[idx] = rewards
    finally:
        model.train(was_training)
    if world == 1:
        return local.numpy()
    gathered = accelerator.gather(local[None].to(accelerator.device)).cpu()  # [world, seqs]
    owner = torch.zeros(len(seqs), dtype=torch.long)
    for b, idx in enumerate(plan):
        owner[idx] = b % world
    return gathered[owner, torch.arange(len(seqs))].numpy()
