"""Training on K responses per prompt end to end: a listwise run learns an order the text decides, the
hold-out keeps every prompt on one side, and N processes match one process accumulating N under token budgets
with groups of mixed K, ties and per-pair weights, beside pairs whose preference strength is a soft label."""

import json
import math
import shutil
from pathlib import Path

import pytest
from group_data import write_groups, write_soft_pairs
from safetensors.torch import load_file

from conftest import QUICKSTART, TINY_MODEL
from rm.config import load_config
from rm.training.run import main


def group_run(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        f"data.source={data}", "data.eval_split=", "data.eval_fraction=0.2", *TINY_MODEL, "collator.max_length=64",
        "train.batch_size=8", "train.eval_batch_size=16", "train.max_steps=60", "train.lr=3e-3", "train.log_steps=5",
        "train.report_to=[]", "train.num_threads=1", "train.save_steps=0", "export.enabled=false",
        f"output_dir={out}", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def groups_file(tmp_path_factory):
    return write_groups(tmp_path_factory.mktemp("groups") / "groups.jsonl", 400, seed=1)


@pytest.fixture(scope="module")
def mixed_file(groups_file, tmp_path_factory):
    """The groups above and 100 pairs with a strength (20 of them 0: a soft 0.5) in one file."""
    path = tmp_path_factory.mktemp("mixed") / "mixed.jsonl"
    shutil.copyfile(groups_file, path)
    return write_soft_pairs(path, 100, seed=2)


@pytest.fixture(scope="module")
def listwise_runs(groups_file, tmp_path_factory):
    """A Plackett-Luce run and the same model untrained (lr 0), on the same held-out groups."""
    root = tmp_path_factory.mktemp("listwise")
    runs = {}
    for name, lr in (("trained", "3e-3"), ("untrained", "0")):
        cfg = load_config(QUICKSTART, group_run(groups_file, root / name, "loss.type=plackett_luce", f"train.lr={lr}"))
        runs[name] = (root / name, main(cfg))
    return runs


def test_plackett_luce_learns_an_order_the_text_decides(listwise_runs):
    (_, trained), (_, untrained) = listwise_runs["trained"], listwise_runs["untrained"]
    n = trained["overall"]["n"]
    assert n == untrained["overall"]["n"] > 100  # every strictly ordered held-out pair, the same ones
    a, b = trained["overall"]["accuracy"], untrained["overall"]["accuracy"]
    se = math.sqrt(a * (1 - a) / n + b * (1 - b) / n)
    print(f"held-out pairwise accuracy: Plackett-Luce {a:.3f}, untrained {b:.3f} (n={n}, SE {se:.3f})")
    assert a - b > 2 * se


def test_no_prompt_is_on_both_sides_of_the_hold_out(listwise_runs):
    out, _ = listwise_runs["trained"]
    report = json.loads((out / "data_report.json").read_text())
    groups = report["groups"]
    assert groups["split_version"] == 3
    assert groups["train"]["groups"] > groups["train"]["prompts"]  # prompts repeat: a split by record would part them
    assert groups["train"]["groups"] + groups["eval"]["groups"] == 400


def test_the_saved_config_keeps_the_split_version_and_the_loss(listwise_runs):
    out, _ = listwise_runs["trained"]
    saved = load_config(out / "config.yaml")
    assert saved.data.split_version == 3 and saved.loss.type == "plackett_luce"


# Token budgets, groups of 2-5 responses with ties, Davidson with a learned nu, every pair weighing 1: the weight
# of a step is then its comparisons, not its groups, and still N processes must equal one accumulating N; with an
# attribute output trained by the Gaussian likelihood beside it (its learned sigma, some scores missing); and pairs
# with soft labels (loss.strength=soft) in the same micro-batches as the groups' hard ones.
HARD = ["collator.max_tokens=300", "collator.eval_max_tokens=300", "train.max_steps=0", "train.epochs=1",
        "loss.ties=davidson", "loss.group_weighting=pair", "train.log_steps=1", "model.head.attributes=[length]",
        "loss.attribute_loss=gaussian", "loss.strength=soft"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_groups_on_n_processes_match_one_process_accumulating_n(launched, mixed_file, processes, tmp_path):
    run, one = launched(processes).run("groups"), tmp_path / "one"  # the `groups` scenario (tests/launched/)
    data = launched(processes).out("groups") / "mixed.jsonl"  # the launch's copy of this module's file, by name too
    assert data.read_bytes() == mixed_file.read_bytes()
    cfg = load_config(QUICKSTART, group_run(data, one, *HARD, "export.enabled=true", f"train.grad_accum={processes}"))
    reference = main(cfg)
    report = json.loads((run / "data_report.json").read_text())
    n_train, n_eval = report["groups"]["train"]["groups"], report["groups"]["eval"]["groups"]
    assert report["strength"]["soft"] == 100 and n_train + n_eval == 500  # the 400 groups and 100 soft pairs
    seen = [json.loads((run / f"batches-{r}.json").read_text()) for r in range(processes)]
    assert len({len(s) for s in seen}) == 1 and all(b["pairs"] for s in seen for b in s)
    assert sorted(i for s in seen for b in s for i in b["pairs"]) == list(range(n_train))  # every item once
    a, b = load_file(run / "export" / "model.safetensors"), load_file(one / "export" / "model.safetensors")
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    configs = [json.loads((r / "export" / "config.json").read_text()) for r in (run, one)]
    nu = [c["rm_davidson_nu"] for c in configs]
    sigma = [c["attribute_sigma"]["length"] for c in configs]
    print(f"groups, {processes} processes vs 1 x grad_accum {processes}: max weight diff {diff:.2g}, nu {nu}, {sigma}")
    assert diff <= 1e-5 and nu[0] == pytest.approx(nu[1], abs=1e-5) and nu[0] != pytest.approx(math.log(2), abs=1e-4)
    assert sigma[0] == pytest.approx(sigma[1], abs=1e-5) and sigma[0] != pytest.approx(1.0, abs=1e-4)  # it learnt
    result = json.loads((run / "eval.json").read_text())
    assert result["overall"]["n"] == reference["overall"]["n"]
    assert result["overall"]["accuracy"] == reference["overall"]["accuracy"]
    fits = result["attributes"]["length"]["overall"], reference["attributes"]["length"]["overall"]
    assert fits[0]["n"] == fits[1]["n"] > 0 and fits[0]["rmse"] == pytest.approx(fits[1]["rmse"], abs=1e-4)
    soft = result["soft_calibration"], reference["soft_calibration"]  # the held-out soft pairs, each counted once
    assert soft[0]["n"] == soft[1]["n"] > 0 and soft[0]["brier"] == pytest.approx(soft[1]["brier"], abs=1e-5)
