"""Pairs whose preference a marker decides while length only goes along with it: the data on which a reward that
length can buy and one that it cannot part ways (the length-disentangled head is checked on it).

The prompt asks for one word; every answer is filler words with one word of `WORDS` among them, at a random place:
the chosen answer holds the word asked for, the rejected one another (drawn the same way, so the two answers are
exchangeable once the prompt is hidden: the marker is learnt only by reading the prompt, later than length). Each
pair draws one short and one long length; `longer_share` of the pairs give the long one to
the chosen answer. At 0.8 (training) length predicts the preference in 80% of the pairs, so a plain Bradley-Terry
model can buy accuracy with length before it learns the marker; at 0.0 (the inverted test) the chosen answer is the
shorter in every pair, so only the marker wins there; at 0.5 length says nothing.

Written in the hh-rlhf layout (`<root>/<subset>/<split>.jsonl.gz`), so it loads as any HH data does.
"""

from __future__ import annotations

import random
from pathlib import Path

from rm.data.synthetic import write_jsonl_gz

WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "piano", "candle")
FILLER = ("the", "plan", "is", "to", "keep", "going", "and", "then", "see", "what", "happens", "next", "day")
ASKS = ("Use the word {w} in your answer.", "Say something with {w} in it.", "Please mention {w}.")
SHORT, LONG = (2, 5), (12, 20)
"""Filler words around the marker, drawn uniformly in each range (inclusive)."""


def answer(rng: random.Random, marker: str, words: int) -> str:
    filler = [rng.choice(FILLER) for _ in range(words)]
    filler.insert(rng.randint(0, words), marker)
    return " " + " ".join(filler) + "."


def pairs(n: int, seed: int, longer_share: float) -> list[dict[str, str]]:
    """`n` pairs: exactly round(n * longer_share) of them (at random places) have the longer chosen answer; the
    same (n, seed, longer_share) always gives the same pairs."""
    rng = random.Random(f"length-pairs/{seed}/{longer_share}")
    longer = set(rng.sample(range(n), round(n * longer_share)))
    out = []
    for i in range(n):
        short, long = rng.randint(*SHORT), rng.randint(*LONG)
        good, bad = (long, short) if i in longer else (short, long)
        asked, other = rng.sample(WORDS, 2)
        prompt = f"\n\nHuman: {rng.choice(ASKS).format(w=asked)}\n\nAssistant:"
        out.append({"chosen": prompt + answer(rng, asked, good), "rejected": prompt + answer(rng, other, bad)})
    return out


def write_length_dataset(
    root: str | Path, n_train: int, n_test: int, seed: int, longer_share: float = 0.8
) -> dict[str, Path]:
    """The three files of the check under `root`: `train` (the chosen answer longer in `longer_share` of the pairs),
    `inverted` (shorter in every pair) and `balanced` (longer in half), each a one-subset hh-rlhf folder's file."""
    root = Path(root)
    files = {
        "train": (root / "marker" / "train.jsonl.gz", pairs(n_train, seed, longer_share)),
        "inverted": (root / "marker" / "test.jsonl.gz", pairs(n_test, seed + 1, 0.0)),
        "balanced": (root / "balanced" / "test.jsonl.gz", pairs(n_test, seed + 2, 0.5)),
    }
    for path, records in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl_gz(path, records)
    return {name: path for name, (path, _) in files.items()}
