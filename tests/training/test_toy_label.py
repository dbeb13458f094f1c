"""A label registered from outside rm (tests/training/toy_label.py: `difficulty`, its loss term and eval block; and
tests/training/response_length.py, the worked example of docs/how-it-works.md) goes through every stage with no
library edit: parsed from its field, stored in the cache, batched, read by its loss term, gathered across processes,
reported."""

import json
import math

import pyarrow as pa
import pytest
import torch

import rm
from conftest import QUICKSTART, SHORT
from rm.collate.padded import PaddedCollator
from rm.config.schema import LossConfig
from rm.data.load import load_pairs
from rm.errors import DataError
from rm.tokens.entry import read_split
from rm.tokens.store import EncodedGroup


@pytest.fixture
def plugins():
    """Both plugin modules registered for the test, forgotten after it (registrations are per process)."""
    import response_length
    import toy_label

    from rm.data.labels import unregister
    from rm.evaluation.summary import unregister_metric

    rm.api.register_label(response_length.RESPONSE_TOKENS)
    rm.api.register_metric(response_length.LENGTH_CORRELATION)
    toy_label.install()
    yield toy_label
    toy_label.uninstall()
    unregister_metric(response_length.LENGTH_CORRELATION.name)
    unregister(response_length.RESPONSE_TOKENS.name)


def test_a_label_is_parsed_from_its_field_and_a_bad_value_names_its_line(plugins, tmp_path):
    held = plugins.write_toy(tmp_path, 3, 5)
    items = load_pairs(str(tmp_path), "test", [])
    assert sorted(p.labels["difficulty"] for p in items if "difficulty" in p.labels) == sorted(sum(held.values(), []))
    assert sum("difficulty" not in p.labels for p in items) == 2  # every fifth record has none

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q", "chosen": "a", "rejected": "b", "difficulty": "hard"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: .*label 'difficulty' .* must be a finite number, got 'hard'"):
        load_pairs(str(bad), "train", [])


def test_the_docs_worked_example_is_the_module_the_tests_run():
    from conftest import REPO

    page = (REPO / "docs" / "how-it-works.md").read_text()
    block = page.split("## Adding a label", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert block == (REPO / "tests" / "training" / "response_length.py").read_text()


def test_merged_records_keep_a_difficulty_they_agree_on_and_drop_one_they_do_not(plugins, tmp_path):
    from rm.config import DataConfig
    from rm.data.data_report import DataReport

    rows = [("a", "b", 1.0), ("b", "c", 1.0), ("x", "y", 1.0), ("y", "z", 2.0)]
    lines = [{"prompt": "p" if i < 2 else "q", "chosen": c, "rejected": r, "difficulty": d} for i, (c, r, d) in
             enumerate(rows)]  # fmt: skip
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = DataReport()
    items = load_pairs(str(tmp_path / "m.jsonl"), "train", [], DataConfig(group_by_prompt=True), report=report)
    assert [g.labels.get("difficulty") for g in items] == [1.0, None]
    assert report.notes["grouped"]["difficulty_dropped"] == 2


def test_the_loss_term_adds_what_a_hand_computation_gives(plugins):
    """Two pairs and a group of three, rewards chosen at random: the term is COEF * sum over groups of
    difficulty * (mean reward)^2, a group without a difficulty adding nothing; each weighs 1 (pairwise loss,
    per-group weighting)."""
    from rm.model.objective import training_loss

    groups = [
        EncodedGroup.pair([1, 2], [3], [4, 5], 0, index=0),
        EncodedGroup.pair([6], [7, 8], [9], 0, index=1),
        EncodedGroup(prompt_ids=[1], response_ids=[[2], [3], [4]], rank=[0, 1, 2], subset_id=0, index=2),
    ]
    groups[0].labels = {"difficulty": 0.5}
    groups[2].labels = {"difficulty": 2.0}
    batch = PaddedCollator(0)(groups)
    assert torch.equal(batch["difficulty"].isnan(), torch.tensor([False, True, False]))
    rewards = torch.randn(len(batch["response_group"]), generator=torch.Generator().manual_seed(0))
    cfg = LossConfig(group_weighting="group")
    with_term, _ = training_loss(cfg, rewards, batch)
    plugins.uninstall()
    without, _ = training_loss(cfg, rewards, batch)
    plugins.install()
    means = [rewards[batch["response_group"] == g].mean().item() for g in range(3)]
    by_hand = plugins.COEF * (0.5 * means[0] ** 2 + 2.0 * means[2] ** 2)
    assert (with_term - without).item() == pytest.approx(by_hand, rel=1e-5)


def test_response_tokens_are_the_fitted_lengths_in_reward_order(plugins, tmp_path, tokenizer):
    from rm.tokens.encode import encode_pairs

    plugins.write_toy(tmp_path, 3, 4)
    split, _ = encode_pairs(load_pairs(str(tmp_path), "test", []), tokenizer, 64, ["easy", "hard"])
    batch = PaddedCollator(tokenizer.pad_token_id)(split[:])
    lengths = [len(split[i].response_ids[k]) for k in range(2) for i in range(len(split))]  # chosen, then rejected
    assert batch["response_tokens"].tolist() == lengths


def train(data, out, *more):
    overrides = [*SHORT, f"output_dir={out}", f"data.source={data}", "data.eval_split=test", *more]
    return rm.train(QUICKSTART, overrides=overrides)


@pytest.mark.slow
def test_a_run_stores_batches_trains_and_reports_the_label_and_a_loss_change_reuses_its_cache(plugins, tmp_path):
    held = plugins.write_toy(tmp_path / "data", 24, 8)
    cache = tmp_path / "cache"
    run = train(tmp_path / "data", tmp_path / "run", f"data.cache_dir={cache}")

    report = json.loads((tmp_path / "run" / "data_report.json").read_text())
    records = [json.loads(line) for path in (tmp_path / "data").rglob("*.jsonl") for line in path.open()]
    with_one = sum("difficulty" in r for r in records)
    assert report["labels"]["difficulty"] == {"items": with_one, "of": len(records), "from": "a record's `difficulty`"}
    (entry,) = cache.glob("data-*")
    table = read_split(entry / "eval.arrow").table
    assert table.schema.field("difficulty").type == pa.float64()
    assert table.schema.field("response_tokens").type == pa.list_(pa.float64())
    stored = [d for d in table.column("difficulty").to_pylist() if not math.isnan(d)]
    assert sorted(stored) == sorted(sum(held.values(), []))

    result = json.loads((run.run_dir / "eval.json").read_text())
    every = sum(held.values(), [])
    assert result["difficulty"]["overall"] == {"n": len(every), "mean": pytest.approx(sum(every) / len(every))}
    assert {s: b["n"] for s, b in result["difficulty"]["subsets"].items()} == {s: len(v) for s, v in held.items()}
    assert result["length_correlation"]["responses"] == 2 * result["overall"]["n"] == 2 * 16

    # A change of the loss reads the same entry; data that lacks the label stops before anything is tokenized.
    train(tmp_path / "data", tmp_path / "again", f"data.cache_dir={cache}", "loss.center_rewards_coef=0.01")
    assert list(cache.glob("data-*")) == [entry]
    for path in (tmp_path / "data").rglob("*.jsonl"):
        path.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "difficulty"}) + "\n"
                                for line in path.read_text().splitlines()))  # fmt: skip
    with pytest.raises(DataError, match=r"loss term 'difficulty' reads label 'difficulty', which no record has"):
        train(tmp_path / "data", tmp_path / "without", f"data.cache_dir={cache}")
    assert list(cache.glob("data-*")) == [entry]


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_n_processes_gather_each_difficulty_once(launched, processes):
    """The same run on 2 and 3 processes (tests/launched/scenarios.py's `toy_label`): its eval blocks count every
    eval group and response once, and the difficulty's mean is the test files' own."""
    out = launched(processes).run("toy_label")
    records = [json.loads(line) for path in (out.parent / "toy").glob("*/test.jsonl") for line in path.open()]
    every = [r["difficulty"] for r in records if "difficulty" in r]
    result = json.loads((out / "eval.json").read_text())
    assert result["train"]["processes"] == processes
    assert result["difficulty"]["overall"] == {"n": len(every), "mean": pytest.approx(sum(every) / len(every))}
    assert result["length_correlation"]["responses"] == 2 * result["overall"]["n"] == 2 * len(records)
