"""Write an HH-RLHF-shaped directory of N pairs per subset, for measuring rm at the scale of the full HH train split.

    python scripts/make_scale_data.py /tmp/hh-scale                 # 40,000 train + 2,000 test pairs x 4 subsets
    python scripts/make_scale_data.py /tmp/hh-scale --train 1000 --test 100

The pairs are the shared real harmless-base file (2,312 pairs) over and over, each copy varied by
rotating the words of its first human turn by a seeded offset (lengths, turn structure and the
chosen/rejected split are the real ones), so copies of a pair mostly differ. Only the layout and the sizes are
realistic; nothing here is meant for training a useful model. Subsets are named as HH's
(`harmless-base`, `helpful-base`, `helpful-online`, `helpful-rejection-sampled`); each holds
`train.jsonl.gz` and `test.jsonl.gz`, read with `data.source=DIR`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "hh-rlhf" / "harmless-base" / "test.jsonl.gz"
SUBSETS = ("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")
HUMAN = "\n\nHuman: "


def vary(record: dict, rng: random.Random) -> dict:
    """The pair with the words of its first human turn rotated (the same rotation in chosen and rejected,
    so they still share their prompt)."""
    chosen, rejected = record["chosen"], record["rejected"]
    start = chosen.find(HUMAN)
    end = chosen.find("\n\nAssistant:", start + 1)
    if start < 0 or end < 0 or not rejected.startswith(chosen[:end]):
        return record
    words = chosen[start + len(HUMAN) : end].split(" ")
    k = rng.randrange(len(words)) if len(words) > 1 else 0
    turn = HUMAN + " ".join(words[k:] + words[:k])
    return {"chosen": chosen[:start] + turn + chosen[end:], "rejected": rejected[:start] + turn + rejected[end:]}


def write(root: Path, n_train: int, n_test: int, seed: int = 0) -> None:
    with gzip.open(SOURCE, "rt", encoding="utf-8") as f:
        base = [json.loads(line) for line in f if line.strip()]
    for s, subset in enumerate(SUBSETS):
        rng = random.Random(f"{seed}/{subset}")
        records = [vary(base[(i + s * 577) % len(base)], rng) for i in range(n_train + n_test)]
        (root / subset).mkdir(parents=True, exist_ok=True)
        for split, part in (("train", records[:n_train]), ("test", records[n_train:])):
            with gzip.open(root / subset / f"{split}.jsonl.gz", "wt", encoding="utf-8", compresslevel=1) as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=40_000, help="train pairs per subset")
    parser.add_argument("--test", type=int, default=2_000, help="test pairs per subset")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write(args.out, args.train, args.test, args.seed)
    total = len(SUBSETS) * (args.train + args.test)
    print(f"{args.out}: {len(SUBSETS)} subsets x ({args.train} train + {args.test} test) = {total} pairs")


if __name__ == "__main__":
    main()
