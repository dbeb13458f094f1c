"""Synthetic stepwise data: solutions whose steps a marker word makes wrong, for checking a process reward model
end to end without downloading a benchmark.

Records are in the stepwise format (TRL's stepwise supervision: `{"prompt": str, "completions": [str, ...],
"labels": [bool, ...]}`, one label per step). Each problem has one prompt and `k` solutions of 2 to 8 steps, each
step a few filler words. A step is erroneous iff it holds one of the made-up `MARKERS`, and a solution holds at
most one: exactly round(n_problems * k * error_share) solutions (at random places) have one, in a step drawn
uniformly among theirs.

Labels after the first error are False although those steps hold no marker: a step that builds on a wrong one is
wrong too, the reading under which ProcessBench asks only for the earliest error, and what Math-Shepherd's Monte
Carlo labels mostly give (a completion from a wrong prefix rarely reaches the right answer). Conversions of
PRM800K differ: TRL's ends each record at the step it rates, so no step follows a wrong one there. Here, a model
must learn "a marker at or before this step", which it can only learn by reading the steps before, the way a PRM
is meant to read a solution; the first False is the ProcessBench label (`first_error_label`).

Written as `<root>/steps/{train,test}.jsonl.gz` by `write_step_dataset`, byte-identical for the same arguments.
"""

from __future__ import annotations

import random
from pathlib import Path

from rm.data.synthetic import write_jsonl_gz

MARKERS = ("zorbic", "quellum", "fraxen", "bliddow")
"""The made-up words that make a step wrong."""
FILLER = ("add", "the", "two", "numbers", "then", "carry", "one", "so", "we", "get", "next", "check", "sum", "value")
THINGS = ("apples", "coins", "marbles", "tickets", "stamps", "shells", "pencils", "cards")
STEPS, WORDS = (2, 8), (3, 6)
"""Steps per solution and filler words per step, drawn uniformly in each range (inclusive)."""


def step_text(rng: random.Random, marker: str | None) -> str:
    """A few filler words, with `marker` at a random place among them when given."""
    words = [rng.choice(FILLER) for _ in range(rng.randint(*WORDS))]
    if marker is not None:
        words.insert(rng.randint(0, len(words)), marker)
    return " ".join(words) + "."


def prompt_text(rng: random.Random) -> str:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    return f"Sam has {a} {rng.choice(THINGS)} and finds {b} more. How many does Sam have now? Solve it step by step."


def first_error_label(labels: list[bool]) -> int:
    """The index of the first step labelled wrong, -1 when every step is right (ProcessBench's label)."""
    return next((i for i, good in enumerate(labels) if not good), -1)


def step_problems(n_problems: int, k: int, seed: int, error_share: float = 0.5) -> list[dict[str, object]]:
    """`n_problems * k` records, each problem's `k` solutions together and sharing its prompt; exactly
    round(n_problems * k * error_share) of them have an erroneous step. The same arguments give the same records."""
    if n_problems < 0 or k < 1:
        raise ValueError(f"need n_problems >= 0 and k >= 1, got n_problems={n_problems}, k={k}")
    if not 0.0 <= error_share <= 1.0:
        raise ValueError(f"error_share must be in [0, 1], got {error_share}")
    rng = random.Random(f"step-problems/{seed}/{k}/{error_share}")
    total = n_problems * k
    with_error = set(rng.sample(range(total), round(total * error_share)))
    out: list[dict[str, object]] = []
    for p in range(n_problems):
        prompt = prompt_text(rng)
        for j in range(k):
            n_steps = rng.randint(*STEPS)
            error_at = rng.randrange(n_steps) if p * k + j in with_error else -1
            marker = rng.choice(MARKERS)
            completions = [step_text(rng, marker if i == error_at else None) for i in range(n_steps)]
            labels = [error_at == -1 or i < error_at for i in range(n_steps)]
            out.append({"prompt": prompt, "completions": completions, "labels": labels})
    return out


def write_step_dataset(
    root: str | Path, n_train: int, n_test: int, seed: int, k: int = 4, error_share: float = 0.5
) -> dict[str, Path]:
    """`<root>/steps/train.jsonl.gz` (`n_train` problems, from `seed`) and `<root>/steps/test.jsonl.gz` (`n_test`
    problems, from seed + 1: other draws than train's), `k` solutions per problem, `error_share` of them wrong."""
    root = Path(root)
    files = {
        "train": (root / "steps" / "train.jsonl.gz", step_problems(n_train, k, seed, error_share)),
        "test": (root / "steps" / "test.jsonl.gz", step_problems(n_test, k, seed + 1, error_share)),
    }
    for path, records in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl_gz(path, records)
    return {name: path for name, (path, _) in files.items()}
