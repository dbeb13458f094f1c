"""Pairs whose preference a marker decides while length only goes along with it: the data on which a reward that
length can buy and one that it cannot part ways (the length-disentangled head is checked on it).

Every answer is filler words with one marker word among them, at a random place: the chosen answer holds one of
`GOOD`, the rejected one of `BAD`. The markers are 64 made-up two-syllable words over one set of syllables, so a
good and a bad marker share their pieces: a model learns them word by word, steadily and later than length (one
marker word is learnt within a hundred steps, and the two parted ways there only briefly; a marker that must match
a word the prompt asks for was learnt at a step that varied by hundreds with the seed). Each pair draws one short
and one long length; `longer_share` of the pairs give the long one to the chosen answer. At 0.8 (training) length
predicts the preference in 80% of the pairs, so a plain Bradley-Terry model can buy accuracy with length before it
learns the markers; at 0.0 (the inverted test) the chosen answer is the shorter in every pair, so only the marker
wins there; at 0.5 length says nothing.

Written in the hh-rlhf layout (`<root>/<subset>/<split>.jsonl.gz`), so it loads as any HH data does.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

from rm.data.synthetic import write_jsonl_gz

SYLLABLES = ("ba", "ko", "mi", "tu", "re", "sa", "li", "no", "pe", "du", "fa", "zo")
_MARKERS = ["".join(pair) for pair in itertools.product(SYLLABLES, SYLLABLES)]
random.Random(7).shuffle(_MARKERS)
GOOD, BAD = tuple(_MARKERS[:32]), tuple(_MARKERS[32:64])
"""The marker words: a chosen answer holds one of GOOD, a rejected one one of BAD."""
FILLER = ("the", "plan", "is", "to", "keep", "going", "and", "then", "see", "what", "happens", "next", "day")
ASKS = ("Write a short note.", "Say something about your day.", "Tell me what comes next.")
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
        prompt = f"\n\nHuman: {rng.choice(ASKS)}\n\nAssistant:"
        chosen, rejected = answer(rng, rng.choice(GOOD), good), answer(rng, rng.choice(BAD), bad)
        out.append({"chosen": prompt + chosen, "rejected": prompt + rejected})
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
