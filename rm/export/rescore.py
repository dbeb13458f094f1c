"""Scoring a run's own pairs again at export time: reward normalisation and checkpoint evaluation.

Bradley-Terry training fixes only reward *differences*; the offset and scale of the rewards are
whatever the run drifted to. Consumers that mix the reward into another objective (RLHF, best-of-n
thresholds) want it on a known scale, so the export can store the mean and standard deviation of
the rewards over the training set. The run's eval.json describes its final weights only, so an
intermediate checkpoint is evaluated here, on the same held-out pairs, when the export is asked to.

Rewards come from the same forward pass as training (`RewardModel`, padded rows), one process.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from rm.collate.padded import PaddedCollator
from rm.config import RunConfig
from rm.errors import ExportError
from rm.model.reward import RewardModel, group_rewards
from rm.tokens.store import EncodedGroup


@torch.no_grad()
def score_encoded(
    hf: PreTrainedModel, encoded: Sequence[EncodedGroup], pad_token_id: int, batch_size: int = 32
) -> dict[str, torch.Tensor]:
    """{"chosen", "rejected"} ([strictly ordered pairs]: the better and the worse response's rewards), "subset_ids"
    (their groups' subsets) and "responses" (every response's reward once), in the order of `encoded`; and
    "pairs_only", whether every group was a plain pair."""
    model = RewardModel(hf).eval()
    collate = PaddedCollator(pad_token_id)
    chosen, rejected, subsets, responses, plain = [], [], [], [], True
    for start in range(0, len(encoded), batch_size):
        batch = {k: v.to(hf.device) for k, v in collate(encoded[start : start + batch_size]).items()}
        r = group_rewards(model, batch).float().cpu()
        chosen.append(r[batch["better"].cpu()])
        rejected.append(r[batch["worse"].cpu()])
        subsets.append(batch["subset_ids"].cpu()[batch["pair_group"].cpu()])
        responses.append(r)
        plain = plain and len(r) == 2 * len(batch["subset_ids"]) == 2 * len(batch["better"])
    cat = torch.cat
    scores = {"chosen": cat(chosen), "rejected": cat(rejected), "subset_ids": cat(subsets), "responses": cat(responses)}
    return scores | {"pairs_only": torch.tensor(plain)}


def normalization(scores: dict[str, torch.Tensor], description: str) -> dict:
    """Mean and (population) standard deviation of every response's reward: for pairs, every chosen and rejected
    reward pooled (in that order, as before groups); a response of a larger group counts once, not per pair."""
    plain = bool(scores.get("pairs_only", True))
    pooled = [scores["chosen"], scores["rejected"]] if plain else [scores["responses"]]
    rewards = torch.cat(pooled).double()
    std = rewards.std(unbiased=False).item()
    if not std > 0:
        raise ExportError(f"rewards over {description} have no spread (std {std}); cannot normalise")
    return {"mean": rewards.mean().item(), "std": std, "n_rewards": len(rewards), "data": description}


def describe_training_data(cfg: RunConfig, n_pairs: int) -> str:
    """The same words at the end of a run and in a later export, so both write the same config.json."""
    return f"{n_pairs} training pairs of {cfg.data.source}"
