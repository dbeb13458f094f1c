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
from rm.data.formats.pair import Pair
from rm.data.load import Example
from rm.evaluation.gather import gather_rewards
from rm.model.probe import choose_layout
from rm.model.reward import RewardModel
from rm.tokens.ids import CheckedIds, EndOfSequence
from rm.tokens.store import EncodedSplit


def score_split(
    model: torch.nn.Module, encoded: EncodedSplit, pad: int, batch_size: int, accelerator: Accelerator
) -> dict[str, torch.Tensor]:
    """`gather_rewards` of every encoded group exactly once, in its order, on every process.

    Training's eval path: its layout (shared-prefix packing where the model reproduces separate forwards
    with it) and its eval plan, each process running its share of the very micro-batches one process would
    (`EvalBatches`; the loader is not prepared, since accelerate's sharding is a second plan), so a response's
    reward comes from the same tensors under any number of processes. A process short of a micro-batch in
    the last round scores a group again, a filler whose rewards gathering drops (rm/evaluation/gather.py).
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
    kept: list[Example], encoded: EncodedSplit, gathered: dict[str, torch.Tensor], tokenizer, eos: str = "none"
) -> list[np.ndarray]:
    """Per kept item, its responses' rewards in the item's order, NaN for a response encoding left out or one the
    model scored NaN or infinite (counted apart by `nonfinite_rewards`): either is left out of the metrics.

    Encoding keeps a group's responses in order and leaves out one that cannot fit max_length with a token of the
    prompt; which ones is found, for the rare group that lost some, by their token ids (a response is never cut).
    """
    return placed(kept, encoded, gathered, gathered["reward"], tokenizer, eos)


def item_attributes(
    kept: list[Example], encoded: EncodedSplit, gathered: dict[str, torch.Tensor], tokenizer, eos: str = "none"
) -> list[np.ndarray]:
    """Per kept item, its responses' attribute outputs ([responses, A]), placed as `item_rewards` places rewards:
    NaN for a response left out or an output not finite."""
    return placed(kept, encoded, gathered, gathered["attribute_outputs"], tokenizer, eos)


def placed(
    kept: list[Example],
    encoded: EncodedSplit,
    gathered: dict[str, torch.Tensor],
    column: torch.Tensor,
    tokenizer,
    eos: str = "none",
) -> list[np.ndarray]:
    """A gathered per-response `column` ([responses] or [responses, A]) split by item, each item's rows at its
    responses' places, NaN where a response was left out or its value is not finite (`eos`: data.eos, with which
    the responses were encoded)."""
    counts = torch.bincount(gathered["group"], minlength=len(kept)).tolist()
    out = []
    for i, (item, r) in enumerate(zip(kept, torch.split(column.double(), counts), strict=True)):
        texts = responses_of(item)
        values = np.full((len(texts), *r.shape[1:]), np.nan)
        places = (
            range(len(texts)) if len(r) == len(texts) else kept_places(texts, encoded[i].response_ids, tokenizer, eos)
        )
        values[list(places)] = np.where(np.isfinite(r.numpy()), r.numpy(), np.nan)
        out.append(values)
    return out


def reward_rows(
    kept: list[Example], rewards: list[np.ndarray], attributes: tuple[list[str], list[np.ndarray]] | None = None
) -> list[dict]:
    """rewards.jsonl's lines, one per item of `kept` with its `rewards`: a pair's `chosen_reward` and
    `rejected_reward` (with their lengths), a group's `rewards` in its order, its `rank` and lengths. With
    `attributes` (the model's attribute names and each item's outputs, [responses, A]) a pair's
    `chosen_attributes` and `rejected_attributes`, a group's `attributes` (one {name: value} per response), as
    `rm score` writes them; a value is NaN (null in the file) for a response too long to score or not finite."""
    names, outputs = attributes if attributes is not None else ([], [None] * len(kept))
    rows = []
    for p, r, out in zip(kept, rewards, outputs, strict=True):
        row = {"origin": p.origin, "subset": p.subset}
        named = [] if out is None else [dict(zip(names, o.tolist(), strict=True)) for o in out]
        if isinstance(p, Pair):
            row |= {"chosen_reward": r[0], "rejected_reward": r[1]}
            row |= {"chosen_attributes": named[0], "rejected_attributes": named[1]} if named else {}
            row |= {"chosen_chars": len(p.chosen), "rejected_chars": len(p.rejected)}
            row |= {"tie": True} if p.tie else {}
        else:
            row |= {"rewards": r.tolist(), "rank": list(p.rank)}
            row |= {"attributes": named} if named else {}
            row |= {"chars": [len(t) for t in p.responses]}
        rows.append(row)
    return rows


def nonfinite_rewards(kept: list[Example], gathered: dict[str, torch.Tensor]) -> tuple[int, list[str]]:
    """How many responses the model scored NaN or infinite (a model whose rewards overflow), and the origins of the
    items holding one. Each group is gathered once (`score_split`), so each response counts once."""
    bad = ~torch.isfinite(gathered["reward"])
    return int(bad.sum()), [kept[i].origin for i in sorted(set(gathered["group"][bad].tolist()))]


def kept_places(texts: tuple[str, ...], response_ids, tokenizer, eos: str = "none") -> list[int]:
    """Which of `texts` a group's encoded `response_ids` are, in order, matched by token ids (each text ended by
    data.eos `eos` as encoding ended it)."""
    places, scored = [], iter(response_ids)
    want = next(scored, None)
    for k, ids in enumerate(CheckedIds(tokenizer)(EndOfSequence.of(tokenizer, eos).texts(list(texts)))):
        if want is not None and list(ids) == list(want):
            places.append(k)
            want = next(scored, None)
    return places
