"""A label from outside rm: each record's `difficulty`, a loss term that reads it and an eval block over it.

`install()` registers the three (each process of a launch calls it), `uninstall()` forgets them. The term is a toy,
COEF * difficulty * (the group's mean reward)^2 per group, so a test can compute it by hand."""

import torch

from rm.api import Label, LossTerm, Metric, register_label, register_loss_term, register_metric
from rm.data.labels import unregister
from rm.evaluation.summary import unregister_metric
from rm.model.objective import unregister_loss_term

COEF = 0.25


def read_difficulty(record, item):
    return record.get("difficulty")


def difficulty_loss(cfg, rewards, batch, weights):
    """Summed over groups, each weighed as its preference term is (`weights`)."""
    group, groups = batch["response_group"], len(batch["subset_ids"])
    sums = torch.zeros(groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, group, rewards)
    mean = sums / torch.bincount(group, minlength=groups).to(rewards.dtype)
    difficulty = batch["difficulty"].to(rewards.dtype).nan_to_num()
    return COEF * (weights * difficulty * mean**2).sum()


def difficulty_block(gathered, subsets):
    """n and mean difficulty of the eval groups that have one, overall and per subset."""

    def summary(rows):
        d = gathered["difficulty"][rows]
        d = d[~d.isnan()].double()
        return {"n": len(d), "mean": d.mean().item() if len(d) else float("nan")}

    subset = gathered["subset"]
    every = torch.ones_like(subset, dtype=torch.bool)
    return {"overall": summary(every), "subsets": {name: summary(subset == i) for i, name in enumerate(subsets)}}


DIFFICULTY = Label(name="difficulty", level="group", fields="a record's `difficulty`", read=read_difficulty)
TERM = LossTerm(name="difficulty", consumes=("difficulty",), loss=difficulty_loss)
METRIC = Metric(name="difficulty", reads=("difficulty",), block=difficulty_block)


def install() -> None:
    register_label(DIFFICULTY)
    register_loss_term(TERM)
    register_metric(METRIC)


def uninstall() -> None:
    unregister_loss_term(TERM.name)
    unregister_metric(METRIC.name)
    unregister(DIFFICULTY.name)


def write_toy(root, n_train: int, n_eval: int, seed: int = 0) -> dict[str, list[float]]:
    """Pairs in `root/<subset>/{train,test}.jsonl` (subsets `easy` and `hard`) whose chosen answer opens with
    "good", each with a `difficulty` (quarters, exact in float32) save every fifth; returns the test records'
    difficulties per subset."""
    import json
    import random

    rng, words = random.Random(seed), "one two three four five six seven eight nine ten".split()
    held: dict[str, list[float]] = {"easy": [], "hard": []}
    for split, n in (("train", n_train), ("test", n_eval)):
        for subset in held:
            (root / subset).mkdir(parents=True, exist_ok=True)
            with open(root / subset / f"{split}.jsonl", "w") as f:
                for i in range(n):
                    tail = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
                    record = {"prompt": f"{split} {subset} question {i}?", "chosen": f" good {tail}",
                              "rejected": f" bad {tail} {rng.choice(words)}"}  # fmt: skip
                    if i % 5:
                        record["difficulty"] = rng.randint(0, 8) / 4
                        if split == "test":
                            held[subset].append(record["difficulty"])
                    f.write(json.dumps(record) + "\n")
    return held
