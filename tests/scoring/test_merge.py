"""`rm merge` (rm/scoring/weight_average.py): reward models fine-tuned from one initialization averaged into one export.

The acceptance run: a base model trained on pairs that a marker word decides (rm/data/length_pairs.py, length
balanced), 30% of the training labels flipped; three members fine-tuned from its export with different data orders
(`train.data_seed`) at a constant learning rate; their average is held-out at least as accurate as their mean and
as the best less one standard error (WARM's claim: averaging keeps what the members share and drops what each one's
last batches pushed it to). Then the cheaper checks: the merge is a plain transformers model `rm score` reads alike,
identical members merge to themselves, and members of other initializations are refused."""

import json
import math
import random
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import rm
from conftest import QUICKSTART, TINY
from rm.config import load_config
from rm.data.length_pairs import pairs
from rm.data.synthetic import write_jsonl_gz
from rm.errors import ConfigError
from rm.scoring.weight_average import merge_models
from rm.training.run import main

MARKER_RUN = [
    "model.random_init.hidden_size=64", "model.random_init.intermediate_size=128",
    "model.random_init.num_hidden_layers=2", "tokenizer.vocab_size=300", "train.batch_size=16", "train.eval_steps=0",
    "train.report_to=[]", "train.num_threads=1",
]  # fmt: skip


def marker_data(root, n_train: int = 2000, n_test: int = 2000, flip: float = 0.3):
    """Marker pairs in the hh-rlhf layout, `flip` of the training labels swapped (seeded)."""
    rng, train = random.Random(5), pairs(n_train, 0, 0.5)
    for record in train:
        if rng.random() < flip:
            record["chosen"], record["rejected"] = record["rejected"], record["chosen"]
    (root / "marker").mkdir(parents=True)
    write_jsonl_gz(root / "marker" / "train.jsonl.gz", train)
    write_jsonl_gz(root / "marker" / "test.jsonl.gz", pairs(n_test, 1, 0.5))
    return root


def se(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


@pytest.mark.slow
def test_the_average_of_three_members_beats_their_mean(tmp_path):
    """Merged >= the members' mean and >= the best member - 1 SE, on n = 2000 held-out pairs.

    Why this configuration: the base (300 steps at lr 3e-3, batch 16, cosine) ends where the members start; each
    member then runs 400 steps of batch 8 at a constant lr 7e-4 (no warm-up, no decay) over 2000 pairs with 30% of
    the labels flipped, 1.6 epochs: its weights end wherever its own last batches pushed them (the test pairs are
    length balanced, the training batches are not quite), and no decay pulls the members back together. Averaging
    cancels what differs and keeps what they share. With a cosine decay to 0 (600 pairs, 25% flipped, lr 1e-3,
    batch 16) the members settled next to each other and the merge sat on their mean (0.660 against 0.6603).

    Measured (one core, this data; members, mean, merged, ensemble = the members' mean reward): members
    0.6755/0.6895/0.6695, mean 0.6782, merged 0.6975 (+0.0193, paired SE 0.0059), ensemble 0.7005, distances
    0.21-0.23. Two more repetitions (other pair seeds, flip rng and base train.seed, n = 4000): members
    0.7135/0.6853/0.7107, merged 0.7133 (+0.0101, paired SE 0.0033), ensemble 0.7238; and members
    0.7137/0.6627/0.6218, merged 0.6577 (-0.0083, paired SE 0.0041), ensemble 0.6835: at a constant lr a member's
    accuracy still moves by a few points from one hundred steps to the next, so the gain holds on this data and
    seed, not on every draw."""
    data = marker_data(tmp_path / "data")
    common = [*MARKER_RUN, f"data.source={data}"]
    main(load_config(QUICKSTART, [*common, "train.lr=3e-3", "train.max_steps=300", f"output_dir={tmp_path / 'base'}"]))
    members = []
    for i in (1, 2, 3):
        run = [
            *common, "train.lr=7e-4", "train.max_steps=400", "train.batch_size=8", "train.scheduler=constant",
            "train.warmup_ratio=0", f"model.name_or_path={tmp_path / 'base' / 'export'}",
        ]  # fmt: skip
        result = main(load_config(QUICKSTART, [*run, f"train.data_seed={i}", f"output_dir={tmp_path / f'm{i}'}"]))
        members.append(result["overall"]["accuracy"])
    out = merge_models([str(tmp_path / f"m{i}") for i in (1, 2, 3)], tmp_path / "merged")
    merged = json.loads((out / "eval.json").read_text())["overall"]
    mean, best, n = sum(members) / 3, max(members), merged["n"]
    print(f"members {members}, mean {mean:.4f}, best {best:.4f}, merged {merged['accuracy']:.4f}, n {n}")
    assert n == 2000
    assert merged["accuracy"] >= mean and merged["accuracy"] >= best - se(best, n)
    card = (out / "README.md").read_text()
    assert "## Merged from" in card and card.count("| 0.3333 |") == 3


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Two short runs from one random init (train.seed 7) in other data orders, and one from another init."""
    root = tmp_path_factory.mktemp("merge-runs")
    short = [*TINY, "train.max_steps=6", "train.eval_steps=0", "train.seed=7"]
    for name, extra in (("a", "train.data_seed=1"), ("b", "train.data_seed=2"), ("other", "train.seed=8")):
        seed = [extra] if extra.startswith("train.data_seed") else [extra]
        main(load_config(QUICKSTART, [*short, *seed, f"output_dir={root / name}"]))
    return root


def test_a_merge_is_a_plain_transformers_model_that_rm_score_reads_alike(tiny_runs, tmp_path):
    out = merge_models([str(tiny_runs / "a"), str(tiny_runs / "b")], tmp_path / "merged", weights=[3, 1])
    a, b = (load_file(tiny_runs / n / "export" / "model.safetensors") for n in ("a", "b"))
    got = load_file(out / "model.safetensors")
    assert got.keys() == a.keys()
    assert all(torch.allclose(got[k], 0.75 * a[k] + 0.25 * b[k], atol=1e-6) for k in got)
    texts = ["\n\nHuman: What is 2 + 3?\n\nAssistant: 5.", "\n\nHuman: Hi\n\nAssistant: Go away."]
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    with torch.no_grad():
        plain = model(**tokenizer(texts, return_tensors="pt", padding=True)).logits[:, 0].tolist()
    assert rm.load(str(out)).score(texts) == pytest.approx(plain, abs=1e-5)


def test_identical_members_merge_to_themselves(tiny_runs, tmp_path):
    runs = [str(tiny_runs / "a")] * 3
    out = merge_models(runs, tmp_path / "same", evaluate=False)
    a, got = load_file(tiny_runs / "a" / "export" / "model.safetensors"), load_file(out / "model.safetensors")
    assert max((got[k] - a[k]).abs().max().item() for k in a) <= 1e-6


def test_a_member_of_another_initialization_is_refused(tiny_runs, tmp_path):
    with pytest.raises(ConfigError, match=r"differ in their initialization.*train.seed"):
        merge_models([str(tiny_runs / "a"), str(tiny_runs / "other")], tmp_path / "x", evaluate=False)
    # the same recorded start but weights from elsewhere: the distance check refuses it
    forged = tmp_path / "forged"
    shutil.copytree(tiny_runs / "a" / "export", forged)
    save_file(load_file(tiny_runs / "other" / "export" / "model.safetensors"), forged / "model.safetensors")
    with pytest.raises(ConfigError, match=r"is 0\.9\d+ \(relative\) from the average, above --max-distance 0.5"):
        merge_models([str(tiny_runs / "a"), str(forged)], tmp_path / "y", evaluate=False)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
