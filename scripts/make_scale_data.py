"""Write an HH-RLHF-shaped directory of N pairs per subset, for measuring rm at the scale of the full HH train split.

    python scripts/make_scale_data.py /tmp/hh-scale                 # 40,000 train + 2,000 test pairs x 4 subsets
    python scripts/make_scale_data.py /tmp/hh-scale --train 1000 --test 100
    python scripts/make_scale_data.py /tmp/hh-real --variant tagged # the real conversations, word for word
    python scripts/make_scale_data.py /tmp/hh-scale --source other/test.jsonl.gz

The pairs are an HH file's over and over (`--source`; by default the shared real harmless-base file, 2,312
pairs). `--variant rotated` (the default, the set rm's memory at 160,000 pairs was first measured
on) varies each copy by rotating the words of its first human turn by a seeded offset (lengths, turn structure and
the chosen/rejected split are the real ones), so copies of a pair mostly differ. `--variant tagged` keeps every
copy's text as written, all its turns, and puts a tag unique in the whole directory ("[#000042] ") at the start
of its first human turn, so no two pairs are equal and tokenizing and truncation see the real conversations.
Only the layout and the sizes are realistic; nothing here is meant for training a useful model. Subsets are named
as HH's (`harmless-base`, `helpful-base`, `helpful-online`, `helpful-rejection-sampled`); each holds
`train.jsonl.gz` and `test.jsonl.gz`, read with `data.source=DIR`. The source file is read at run time (its text
is never part of this repository).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from get_hh_data import hh_data_root  # noqa: E402

DEFAULT_SOURCE = hh_data_root() / "harmless-base" / "test.jsonl.gz"  # $RM_HH_DATA, make data, or ../shared
SUBSETS = ("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")
HUMAN = "\n\nHuman: "
VARIANTS = ("rotated", "tagged")


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


def tag(record: dict, n: int) -> dict:
    """The pair word for word, with "[#<n>] " opening its first human turn in chosen and rejected alike
    (a text without a human turn gets it in front)."""

    def tagged(text: str) -> str:
        at = text.find(HUMAN)
        at = at + len(HUMAN) if at >= 0 else 0
        return f"{text[:at]}[#{n:06d}] {text[at:]}"

    return {"chosen": tagged(record["chosen"]), "rejected": tagged(record["rejected"])}


def records(
    n_train: int, n_test: int, seed: int = 0, variant: str = "rotated", source: Path = DEFAULT_SOURCE
) -> dict[str, list[dict]]:
    """Each subset's train + test records, in that order, from the HH file `source` (gzipped or not; read now)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {', '.join(VARIANTS)}")
    with (gzip.open if source.suffix == ".gz" else open)(source, "rt", encoding="utf-8") as f:
        base = [json.loads(line) for line in f if line.strip()]
    out, per_subset = {}, n_train + n_test
    for s, subset in enumerate(SUBSETS):
        rng = random.Random(f"{seed}/{subset}")
        picks = [base[(i + s * 577) % len(base)] for i in range(per_subset)]
        if variant == "tagged":
            out[subset] = [tag(r, s * per_subset + i) for i, r in enumerate(picks)]
        else:
            out[subset] = [vary(r, rng) for r in picks]
    return out


def write(
    root: Path, n_train: int, n_test: int, seed: int = 0, variant: str = "rotated", source: Path = DEFAULT_SOURCE
) -> None:
    for subset, part in records(n_train, n_test, seed, variant, source).items():
        (root / subset).mkdir(parents=True, exist_ok=True)
        for split, rows in (("train", part[:n_train]), ("test", part[n_train:])):
            with gzip.open(root / subset / f"{split}.jsonl.gz", "wt", encoding="utf-8", compresslevel=1) as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=40_000, help="train pairs per subset")
    parser.add_argument("--test", type=int, default=2_000, help="test pairs per subset")
    parser.add_argument("--seed", type=int, default=0, help="the rotations' seed (rotated only)")
    parser.add_argument("--variant", choices=VARIANTS, default="rotated", help="how copies differ (module doc)")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the HH file whose pairs are copied")
    args = parser.parse_args()
    write(args.out, args.train, args.test, args.seed, args.variant, args.source)
    total = len(SUBSETS) * (args.train + args.test)
    print(
        f"{args.out}: {len(SUBSETS)} subsets x ({args.train} train + {args.test} test) = {total} {args.variant} pairs"
    )


if __name__ == "__main__":
    main()
