"""The seeded hold-out by prompt (data.split_version 2) and by record (1): a file that repeats prompts, as
binarized UltraFeedback does, never trains on a prompt it holds out, and distinct prompts split as before."""

import json
import random

from rm.config import DataConfig
from rm.data.formats.pair import Pair
from rm.data.load import eval_pairs, holdout_split, load_data


def repeated_prompts(path, prompts: int = 60, per_prompt: int = 6):
    """Binarized groups: `per_prompt` pairs of each prompt, each a record of its own."""
    rng = random.Random(0)
    with open(path, "w") as f:
        for p in range(prompts):
            for k in range(per_prompt):
                record = {"prompt": f"prompt {p}", "chosen": f"good {k} {rng.random()}", "rejected": f"bad {k}"}
                f.write(json.dumps(record) + "\n")
    return path


def test_no_prompt_is_on_both_sides(tmp_path):
    source = repeated_prompts(tmp_path / "binarized.jsonl")
    cfg = DataConfig(source=str(source), eval_split="", eval_fraction=0.2)
    loaded = load_data(cfg, tmp_path)
    train, held = {p.prompt for p in loaded.train}, {p.prompt for p in loaded.eval}
    assert not train & held and len(held) == 12 and len(loaded.eval) == 72
    assert loaded.report.notes["groups"]["eval"]["prompts"] == 12
    assert "groups: train 48 prompts, 288 groups, 576 responses; eval 12 prompts" in "\n".join(loaded.report.describe())
    # Version 1 (by record) parts most of them: what a user saw, 72 held-out pairs from 52 prompts.
    old = load_data(DataConfig(source=str(source), eval_split="", eval_fraction=0.2, split_version=1), tmp_path)
    assert {p.prompt for p in old.train} & {p.prompt for p in old.eval}
    assert old.report.notes["groups"]["split_version"] == 1
    # rm eval --holdout picks the same held-out pairs as the run did, under either version.
    for version, run in ((2, loaded), (1, old)):
        again = eval_pairs(DataConfig(source=str(source), eval_split="", eval_fraction=0.2, split_version=version))
        assert [p.origin for p in again] == [p.origin for p in run.eval]


def test_with_distinct_prompts_both_versions_draw_the_same_split():
    pairs = [Pair(f"prompt {i}", f"c{i}", f"r{i}", "s" if i % 3 else "t", origin=f"f:{i}") for i in range(200)]
    for seed in (0, 5):
        by_prompt = holdout_split(pairs, 0.1, seed, version=2)
        by_record = holdout_split(pairs, 0.1, seed, version=1)
        assert [[p.origin for p in side] for side in by_prompt] == [[p.origin for p in side] for side in by_record]
