"""Two tiny trained runs whose exports the card and path tests read, each trained once per test session.

`group_run`: groups of 2-4 ranked responses with ties (Plackett-Luce, Davidson's learned nu), its data in a
subset folder of one temporary directory (with one malformed line, skipped and reported) and its output in
another, then `rm eval` on its export: what the card of a listwise run says, and what must carry no path of this
machine. `attribute_run`: pairs rated on two attributes (Bradley-Terry with centring, Gaussian attribute loss, the
reward a mix of the attributes). A few optimizer steps each: the card describes the run, not how well it learned.
"""

import json
import random
from pathlib import Path

from conftest import QUICKSTART, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config
from rm.training.run import main

WORDS = ("great", "good", "poor", "awful")
_RUNS: dict[str, Path] = {}


def write_groups(path: Path, n: int = 80, seed: int = 0) -> Path:
    """Groups whose first word decides the rank (equal words tie), each response with a `length` rating."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            words = [WORDS[0], WORDS[3], *(rng.choice(WORDS) for _ in range(rng.randint(0, 2)))]
            responses = [
                {"text": f"{w} answer {k} " + "x " * rng.randint(1, 5), "score": float(4 - WORDS.index(w))}
                for k, w in enumerate(words)
            ]
            f.write(json.dumps({"prompt": f"question {i}: which is best?", "responses": responses}) + "\n")
        f.write("{not json\n")  # skipped: its file and line go into the reports
    return path


def write_rated_pairs(path: Path, n: int = 60, seed: int = 0) -> Path:
    """HelpSteer2-style rows, two responses per prompt, rated on correctness and verbosity."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            for right in (True, False):
                words = rng.randint(1, 9)
                text = f"{a + b if right else a + b + 1} " + "indeed " * words
                row = {"prompt": f"q{i}: what is {a} + {b}?", "response": text}
                f.write(
                    json.dumps(
                        row
                        | {"helpfulness": 4 if right else 1, "correctness": 4 if right else 0, "verbosity": words // 3}
                    )
                    + "\n"
                )
    return path


def trained(data: Path, out: Path, *extra: str) -> Path:
    args = [
        f"data.source={data}", "data.eval_split=", "data.eval_fraction=0.25", "data.cache=false", *TINY_MODEL,
        "collator.max_length=64", "train.batch_size=8", "train.eval_batch_size=16", "train.max_steps=4",
        "train.report_to=[]", "train.num_threads=1", "train.save_steps=0", f"output_dir={out}", *extra,
    ]  # fmt: skip
    main(load_config(QUICKSTART, args))
    return out


def group_run(tmp_path_factory) -> Path:
    """The listwise run's directory (its export in export/, `rm eval` of that export in eval/)."""
    if "group" not in _RUNS:
        data = write_groups(tmp_path_factory.mktemp("card_data") / "ranked" / "groups.jsonl")
        out = tmp_path_factory.mktemp("card_out") / "run"
        # vocab_size above what the BPE finds in this data: the card must give the tokenizer's true size
        extra = (
            "loss.type=plackett_luce",
            "loss.ties=davidson",
            "data.on_bad_record=skip",
            "tokenizer.vocab_size=1024",
        )
        trained(data, out, *extra)
        argv = ["eval", "--model", str(out / "export"), "--data", str(data), "--on-bad-record", "skip"]
        assert cli([*argv, "--out", str(out / "eval"), "--bootstrap-samples", "20", "--num-threads", "1"]) == 0
        _RUNS["group"] = out
    return _RUNS["group"]


def attribute_run(tmp_path_factory) -> Path:
    if "attributes" not in _RUNS:
        root = tmp_path_factory.mktemp("card_attributes")
        extra = (
            "model.head.attributes=[correctness, verbosity]", "model.head.attribute_scales={correctness: [0, 4]}",
            "model.head.reward_from_attributes={correctness: 1.0, verbosity: -0.25}", "loss.attribute_loss=gaussian",
            "loss.attribute_coef=0.5", "loss.center_rewards_coef=0.01",
        )  # fmt: skip
        _RUNS["attributes"] = trained(write_rated_pairs(root / "rows.jsonl"), root / "run", *extra)
    return _RUNS["attributes"]
