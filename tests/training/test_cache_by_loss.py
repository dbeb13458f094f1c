"""What the tokenized-data cache holds does not depend on the loss or the head: on pairwise records merged by
prompt (`data.group_by_prompt: true`), runs that change `loss.type`, `loss.strength` hard to soft and add
`model.head.attributes` read the entry the first run wrote, and each still gets what its loss makes of the data
(rm/collate/loss_labels.py): Plackett-Luce skips the prompts whose records order their answers in a cycle, soft
labels state their scale, attributes their scales."""

import json
import random

import pytest

import rm
from conftest import QUICKSTART, SHORT

CYCLIC = range(0, 60, 10)
"""The prompts whose third record closes a cycle (c over a after a over b and b over c)."""


def write_merged_pairs(path, prompts: int = 60, seed: int = 0):
    rng, words = random.Random(seed), "one two three four five six".split()
    with open(path, "w") as f:
        for i in range(prompts):
            a, b, c = (f" {tag} " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) for tag in "abc")
            third = (c, a) if i in CYCLIC else (a, c)
            for chosen, rejected in ((a, b), (b, c), third):
                lengths = {"chosen_attributes": {"length": len(chosen.split())},
                           "rejected_attributes": {"length": len(rejected.split())}}  # fmt: skip
                record = {"prompt": f"question {i}?", "chosen": chosen, "rejected": rejected, **lengths}
                f.write(json.dumps(record | {"strength": rng.randint(1, 3)}) + "\n")  # a merged group keeps none
        for j in range(20):  # prompts of one record: pairs, each with its strength
            record = {"prompt": f"single {j}?", "chosen": f" good {words[j % 6]}", "rejected": f" bad {words[j % 5]}"}
            f.write(json.dumps(record | {"strength": 1 + j % 3}) + "\n")
    return path


@pytest.mark.slow
def test_runs_that_change_the_loss_or_the_head_read_the_same_entry(tmp_path):
    data, cache = write_merged_pairs(tmp_path / "pairs.jsonl"), tmp_path / "cache"
    common = [*SHORT, f"data.source={data}", "data.eval_split=", "data.group_by_prompt=true",
              "data.on_bad_record=skip", f"data.cache_dir={cache}"]  # fmt: skip
    runs = {
        "pairwise": [],
        "listwise": ["loss.type=plackett_luce"],
        "soft": ["loss.strength=soft"],
        "attributes": ["model.head.attributes=[length]"],
    }
    reports = {}
    for name, extra in runs.items():
        rm.train(QUICKSTART, overrides=[*common, *extra, f"output_dir={tmp_path / name}"])
        assert len(list(cache.glob("data-*"))) == 1, f"{name} wrote an entry of its own"
        reports[name] = json.loads((tmp_path / name / "data_report.json").read_text())

    assert reports["pairwise"]["skipped"] == {} and reports["pairwise"]["grouped"]["groups_with_cycles"] == 6
    assert reports["listwise"]["skipped"] == {"contradictory_order": len(CYCLIC)}
    assert reports["soft"]["strength"] == {"max": 3, "declared": False, "map": "linear", "soft": 20, "hard": 60}
    assert reports["attributes"]["attributes"]["length"]["declared"] is False
    assert all("strength" not in reports[n] and "attributes" not in reports[n] for n in ("pairwise", "listwise"))
