"""The hold-out by prompt across subsets (data.split_version 3, the default): one prompt in two subsets (two
folders of an hh-style directory, or records naming their own subset) is on one side in all of them; where no
prompt spans two subsets it draws version 2's split exactly; old runs keep their version; an explicit eval split
that shares prompts with training is counted and warned about, not changed."""

import json
import random
from pathlib import Path

import pytest

from rm.config import DataConfig, RunConfig, load_config
from rm.config.loader import saved_split_version
from rm.data import synthetic
from rm.data.formats.pair import Pair
from rm.data.load import eval_pairs, holdout_split, load_data, load_pairs
from rm.errors import ConfigError


def origins(split: tuple[list, list]) -> list[list[str]]:
    return [[p.origin for p in side] for side in split]


def write_folders(root: Path, prompts: int = 200, split: str = "train", folders: tuple = ("alpha", "beta")) -> Path:
    """An hh-style directory whose folders hold the same `prompts` prompts (each answered apart per folder)."""
    for name in folders:
        (root / name).mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps({"prompt": f"prompt {i}", "chosen": f"{name} good {i}", "rejected": f"{name} bad {i}"})
            for i in range(prompts)
        ]
        (root / name / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_a_prompt_in_two_folders_is_held_out_in_both(tmp_path):
    """The case a user met: the same 200 prompts in two folders. Version 2 trained on 28 of its 34 held-out prompts
    (seed 0, fraction 0.1); version 3 holds out 20 prompts, each in both folders, and trains on none of them."""
    source = write_folders(tmp_path / "data")
    cfg = DataConfig(source=str(source), eval_split="", eval_fraction=0.1)
    loaded = load_data(cfg, tmp_path)
    train, held = {p.prompt for p in loaded.train}, {p.prompt for p in loaded.eval}
    assert not train & held and len(held) == 20 and len(train) == 180
    assert {s: sum(p.subset == s for p in loaded.eval) for s in ("alpha", "beta")} == {"alpha": 20, "beta": 20}
    assert loaded.report.notes["overlap"] == {"eval_prompts": 20, "eval_prompts_in_train": 0, "eval_groups_in_train": 0}
    assert loaded.report.notes["groups"]["split_version"] == 3
    assert not any(line.startswith("overlap") for line in loaded.report.describe())
    # rm eval --holdout draws the same held-out pairs again.
    assert [p.origin for p in eval_pairs(cfg)] == [p.origin for p in loaded.eval]
    # Version 2 (what runs saved with it still draw) leaks, and the report says so.
    old = load_data(DataConfig(source=str(source), eval_split="", eval_fraction=0.1, split_version=2), tmp_path)
    assert (
        old.report.notes["overlap"]["eval_prompts"] == 34 and old.report.notes["overlap"]["eval_prompts_in_train"] == 28
    )
    said = [line for line in old.report.describe() if line.startswith("overlap")]
    assert said and "28 of 34 eval prompts" in said[0] and "split_version 2" in said[0]


def test_records_naming_their_own_subset_share_the_rule(tmp_path):
    """One file whose records say their subset: a prompt under two subsets is on one side."""
    path = tmp_path / "mixed.jsonl"
    rows = [
        {"prompt": f"q{i}", "chosen": f"{s} yes", "rejected": f"{s} no", "subset": s} for s in "xy" for i in range(50)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for seed in range(4):
        loaded = load_data(DataConfig(source=str(path), eval_split="", eval_fraction=0.2, split_seed=seed), tmp_path)
        assert not {p.prompt for p in loaded.train} & {p.prompt for p in loaded.eval}
        assert len(loaded.eval) == 20 and {p.subset for p in loaded.eval} == {"x", "y"}


def test_without_shared_prompts_version_3_draws_version_2s_split(tmp_path):
    """Several subsets whose prompts repeat within a subset but never across: the generated data (three subsets,
    1,175 prompts in 3,000 records) and a handmade set of four subsets of uneven size, some of one prompt."""
    root = synthetic.write_dataset(tmp_path / "synthetic", 3000, 3, 0)
    generated = load_pairs(str(root), "train", [])
    rng = random.Random(0)
    sizes = {"a": 1, "b": 7, "c": 40, "d": 300}
    handmade = [
        Pair(f"{s} prompt {rng.randrange(n)}", f"good {i}", f"bad {i}", s, origin=f"{s}:{i}")
        for s, n in sizes.items()
        for i in range(2 * n)
    ]
    for pairs in (generated, handmade):
        for seed in (0, 1, 7):
            for fraction in (0.05, 0.1, 0.3):
                v2 = holdout_split(pairs, fraction, seed, version=2)
                assert origins(holdout_split(pairs, fraction, seed, version=3)) == origins(v2)


def test_each_subset_keeps_its_share_as_far_as_the_draw_allows():
    """Subsets draw in sorted order. `a-small` (10 prompts) holds out 2 at 0.2; `b-big` holds the same 10 and 90 of
    its own: its 20 held-out prompts are those 2 and 18 drawn from the 90. `c-copy`, whose prompts were all drawn
    before, keeps their sides (its 20 are b-big's)."""
    small = [Pair(f"q{i}", "a", "b", "a-small", origin=f"small:{i}") for i in range(10)]
    big = [Pair(f"q{i}", "c", "d", "b-big", origin=f"big:{i}") for i in range(100)]
    copy = [Pair(f"q{i}", "e", "f", "c-copy", origin=f"copy:{i}") for i in range(100)]
    for seed in range(5):
        train, held = holdout_split(copy + big + small, 0.2, seed)
        by = {s: {p.prompt for p in held if p.subset == s} for s in ("a-small", "b-big", "c-copy")}
        assert len(by["a-small"]) == 2 and len(by["b-big"]) == 20 and by["a-small"] <= by["b-big"]
        assert by["c-copy"] == by["b-big"] and not {p.prompt for p in train} & by["b-big"]


def test_an_explicit_eval_split_that_shares_prompts_is_counted_and_warned_not_moved(tmp_path):
    source = write_folders(tmp_path / "data", prompts=30)
    write_folders(source, prompts=6, split="test", folders=("alpha",))  # prompts 0-5: training prompts too
    loaded = load_data(DataConfig(source=str(source)), tmp_path)
    assert len(loaded.eval) == 6 and len(loaded.train) == 60
    assert loaded.report.notes["overlap"] == {"eval_prompts": 6, "eval_prompts_in_train": 6, "eval_groups_in_train": 6}
    said = [line for line in loaded.report.describe() if line.startswith("overlap")]
    assert said == [
        "overlap: 6 of 6 eval prompts (6 eval examples) are training prompts too, and score higher for it "
        "(data.eval_split is scored as given, nothing moved)"
    ]


def test_new_runs_default_to_version_3_and_old_ones_keep_theirs(tmp_path):
    from rm.training.checkpoint import with_its_split

    assert load_config(None, []).data.split_version == 3
    assert load_config(None, ["data.split_version=2"]).data.split_version == 2
    with pytest.raises(ConfigError, match=r"data\.split_version: 4 is not 1 \(by record\), 2 .* or 3"):
        load_config(None, ["data.split_version=4"])
    # Resuming a checkpoint saved with version 2 under today's default keeps 2: its held-out prompts stay held out.
    step = tmp_path / "step-4"
    step.mkdir()
    (step / "config.yaml").write_text("data:\n  eval_split: ''\n  split_version: 2\n")
    assert with_its_split(RunConfig(data=DataConfig(split_version=3)), step).data.split_version == 2
    # The one rule for a saved config (resume, export, rm eval --holdout): as written, or 1 for a run saved before it.
    (step / "old.yaml").write_text("data:\n  eval_split: ''\n")
    (step / "bad.yaml").write_text("data:\n  split_version: two\n")
    assert saved_split_version(step / "config.yaml") == 2 and saved_split_version(step / "old.yaml") == 1
    with pytest.raises(ConfigError, match=r"bad\.yaml: data\.split_version: expected an integer, got 'two'"):
        saved_split_version(step / "bad.yaml")
