"""Write 4-response groups built from the real HH harmless-base file, for the grouped-training benchmark.

    python scripts/make_group_data.py /tmp/hh-groups             # all 2,312 pairs: ~1,850 train groups
    python scripts/make_group_data.py /tmp/hh-groups --limit 400
    python scripts/make_group_data.py /tmp/hh-groups --source other/test.jsonl.gz

Each pair of the source (`--source`; `../shared/data/hh-rlhf/harmless-base/test.jsonl.gz` unless told) becomes
one group: its prompt, its chosen and rejected responses, and two responses taken from other prompts (the chosen
response of one and the rejected response of another), ranked chosen > rejected > the other prompt's chosen > the
other prompt's rejected. The off-topic answers are worse than either answer to the question asked; their order
between themselves follows their own annotation. So every group holds C(4, 2) = 6 strictly ordered pairs. Written
(nothing from the source is part of this repository; the file is read at run time):

- `groups/train.jsonl`: the groups in Nectar's fields (`prompt` HH text, `answers: [{answer, rank, model}]`,
  rank 1 best), one per line;
- `pairs/train.jsonl`: the same groups binarized, all 6 ordered pairs of each in HH's fields (`chosen`,
  `rejected`: whole conversations), group after group, for trainers that take pairs only;
- `heldout/test.jsonl`: the held-out prompts' original HH pairs, as in the source, to compare the models on.

Train and held-out prompts are apart (the last `--eval-fraction` of the pairs, in file order), and the
off-topic answers of a train group come from train pairs only. Pairs whose responses go on past one assistant
turn are kept as groups but never lend an off-topic answer.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "scripts"))

from get_hh_data import hh_data_root  # noqa: E402

from rm.data.formats.hh import HUMAN, split_pair  # noqa: E402

DEFAULT_SOURCE = hh_data_root() / "harmless-base" / "test.jsonl.gz"  # $RM_HH_DATA, make data, or ../shared
ORDER = ("chosen", "rejected", "other prompt's chosen", "other prompt's rejected")


def read_pairs(source: Path = DEFAULT_SOURCE, limit: int = 0) -> list[tuple[dict, tuple[str, str, str]]]:
    """(record, (prompt, chosen response, rejected response)) for every pair of the HH file `source` (gzipped or
    not) that splits, in file order."""
    out = []
    with (gzip.open if source.suffix == ".gz" else open)(source, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            try:
                out.append((record, split_pair(record["chosen"], record["rejected"])))
            except ValueError:
                continue
            if limit and len(out) == limit:
                break
    return out


def single_turn(response: str) -> bool:
    """A one-turn answer with some text: a donor of off-topic answers (HH has a few empty answers, which would make
    a group rm refuses as a bad record)."""
    return HUMAN not in response and bool(response.strip())


def groups(split: list[tuple[str, str, str]]) -> list[tuple[str, list[str]]]:
    """(prompt, [chosen, rejected, off-topic chosen, off-topic rejected]) for each pair of `split`."""
    donors = [i for i, (_, c, r) in enumerate(split) if single_turn(c) and single_turn(r)]
    out = []
    for i, (prompt, chosen, rejected) in enumerate(split):
        others = [d for d in donors if d != i]
        a = others[i % len(others)]
        b = others[(i + 1) % len(others)]
        extra = [split[a][1], split[b][2]]
        if len({chosen, rejected, *extra}) == 4:
            out.append((prompt, [chosen, rejected, *extra]))
    return out


def write(root: Path, limit: int = 0, eval_fraction: float = 0.2, source: Path = DEFAULT_SOURCE) -> dict[str, int]:
    """The three files under `root` from `source`'s first `limit` pairs (0: all); their counts."""
    pairs = read_pairs(source, limit)
    cut = len(pairs) - int(len(pairs) * eval_fraction)
    train = groups([split for _, split in pairs[:cut]])
    for folder in ("groups", "pairs", "heldout"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    with open(root / "groups" / "train.jsonl", "w", encoding="utf-8") as f:
        for prompt, responses in train:
            answers = [{"answer": text, "rank": k + 1, "model": ORDER[k]} for k, text in enumerate(responses)]
            f.write(json.dumps({"prompt": prompt, "answers": answers}, ensure_ascii=False) + "\n")
    with open(root / "pairs" / "train.jsonl", "w", encoding="utf-8") as f:
        for prompt, responses in train:
            for a in range(4):
                for b in range(a + 1, 4):
                    pair = {"chosen": prompt + responses[a], "rejected": prompt + responses[b]}
                    f.write(json.dumps(pair, ensure_ascii=False) + "\n")
    with open(root / "heldout" / "test.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record, _ in pairs[cut:])
    return {"groups": len(train), "pairs": 6 * len(train), "heldout": len(pairs) - cut}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="source pairs to read (0: all)")
    parser.add_argument("--eval-fraction", type=float, default=0.2, help="the last share of prompts held out")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the HH file the groups are made of")
    args = parser.parse_args()
    counts = write(args.out, args.limit, args.eval_fraction, args.source)
    print(f"{args.out}: {counts['groups']} train groups of 4 ({counts['pairs']} pairs), {counts['heldout']} held-out")


if __name__ == "__main__":
    main()
