"""Every response's reward for `rm eval`: the encoded split scored on training's eval path, then put back in
each item's order.

Kept apart from eval.json's numbers (rm/evaluation/eval_result.py) because this is the part that runs the model
on every process: it must reproduce the run's eval (same layout, same micro-batches, each group gathered once),
whereas what is computed from its rewards runs on the main process alone.
"""

from __future__ import annotations

import numpy as np
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.collate.shard import EvalBatches
from rm.data.formats.group import responses_of
from rm.data.load import Example
from rm.evaluation.gather import gather_rewards
from rm.model.probe import choose_layout
from rm.model.reward import RewardModel
from rm.tokens.ids import CheckedIds
from rm.tokens.store import EncodedSplit


def score_split(
    model: torch.nn.Module, encoded: EncodedSplit, pad: int, batch_size: int, accelerator: Accelerator
) -> dict[str, torch.Tensor]:
    """`gather_rewards` of every encoded group exactly once, in its order, on every process.

    Training's eval path: its layout (shared-prefix packing where the model reproduces separate forwards
    with it) and its eval plan, each process running its share of the very micro-batches one process would
    (`EvalBatches`; the loader is not prepared, since accelerate's sharding is a second plan), so a response's
    reward comes from the same tensors under any number of processes. A process short of a micro-batch in
    the last round scores a group again; gathering keeps one copy per group index.
    """
    layout = choose_layout(model, "auto", pad)[0] if isinstance(model, RewardModel) else "padded"
    collate = SharedCollator(pad) if layout == "shared" else PaddedCollator(pad)
    plan = PairBatches(encoded, layout, batch_size, shuffle=False)
    batches = EvalBatches(plan, accelerator.process_index, accelerator.num_processes)
    gathered = gather_rewards(model, DataLoader(encoded, batch_sampler=batches, collate_fn=collate), accelerator)
    # Each group exactly once (indices 0..n-1, each once), or the numbers made from them would be wrong.
    if not torch.equal(gathered["index"], torch.arange(len(encoded))):
        raise RuntimeError(f"gathered {len(gathered['index'])} rewards for {len(encoded)} groups")
    return gathered


def item_rewards(
    kept: list[Example], encoded: EncodedSplit, gathered: dict[str, torch.Tensor], tokenizer
) -> list[np.ndarray]:
    """Per kept item, its responses' rewards in the item's order, NaN for a response encoding left out or one the
    model scored NaN or infinite (counted apart by `nonfinite_rewards`): either is left out of the metrics.

    Encoding keeps a group's responses in order and leaves out one that cannot fit max_length with a token of the
    prompt; which ones is found, for the rare group that lost some, by their token ids (a response is never cut).
    """
    counts = torch.bincount(gathered["group"], minlength=len(kept)).tolist()
    out = []
    for i, (item, r) in enumerate(zip(kept, torch.split(gathered["reward"].double(), counts), strict=True)):
        texts = responses_of(item)
        rewards = np.full(len(texts), np.nan)
        places = range(len(texts)) if len(r) == len(texts) else kept_places(texts, encoded[i].response_ids, tokenizer)
        rewards[list(places)] = np.where(np.isfinite(r.numpy()), r.numpy(), np.nan)
        out.append(rewards)
    return out


def nonfinite_rewards(kept: list[Example], gathered: dict[str, torch.Tensor]) -> tuple[int, list[str]]:
    """How many responses the model scored NaN or infinite (a model whose rewards overflow), and the origins of the
    items holding one. Each group is gathered once (`score_split`), so each response counts once."""
    bad = ~torch.isfinite(gathered["reward"])
    return int(bad.sum()), [kept[i].origin for i in sorted(set(gathered["group"][bad].tolist()))]


def kept_places(texts: tuple[str, ...], response_ids, tokenizer) -> list[int]:
    """Which of `texts` a group's encoded `response_ids` are, in order, matched by token ids."""
    places, scored = [], iter(response_ids)
    want = next(scored, None)
    for k, ids in enumerate(CheckedIds(tokenizer)(list(texts))):
        if want is not None and list(ids) == list(want):
            places.append(k)
            want = next(scored, None)
    return places
