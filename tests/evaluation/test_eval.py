"""`rm eval`: the files it writes, its numbers against plain transformers, and which pairs it reads."""

import json
import math

import matplotlib.image
import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rm.cli import build_parser
from rm.cli import main as cli_main
from rm.cli.evaluate import eval_data
from rm.config import DataConfig
from rm.data.data_report import DataReport, shown_text
from rm.data.load import eval_pairs, load_pairs, load_splits
from rm.evaluation import metrics
from rm.evaluation.eval_report import PLOTS, EvalOptions, describe_data
from rm.evaluation.eval_report import evaluate_model as main
from rm.evaluation.eval_result import build_result
from rm.evaluation.ranking_metrics import ratio_bootstrap_ci

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    """Written, a PNG by its signature, and decodable into a non-empty image."""
    assert path.is_file(), path
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100, path


@pytest.fixture(scope="module")
def report(exported_tiny, synthetic_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    data = DataConfig(source=str(synthetic_root))  # its test split, as `rm eval --data` reads by default
    result = main(str(exported_tiny), data, out, EvalOptions(batch_size=7, samples=300, seed=1))
    return out, result


@pytest.mark.slow
def test_every_file_is_written_and_every_plot_is_a_png(report):
    out, result = report
    for name in ["eval.json", "report.md", "rewards.jsonl"]:
        assert (out / name).is_file(), name
    for name in PLOTS:
        assert_png(out / name)
    md = (out / "report.md").read_text()
    assert all(f"]({name})" in md for name in PLOTS)  # every figure is shown in the report
    assert json.loads((out / "eval.json").read_text())["eval"]["plots"] == list(PLOTS)


def test_eval_json_has_the_training_shape_plus_the_new_fields(report, synthetic_root):
    out, result = report
    saved = json.loads((out / "eval.json").read_text())
    pairs = load_pairs(str(synthetic_root), "test", [])
    assert saved["overall"]["n"] == len(pairs) == 60
    assert {name: m["n"] for name, m in saved["subsets"].items()} == {
        "harmless": 20,
        "helpful-arithmetic": 20,
        "helpful-recall": 20,
    }
    fields = ["accuracy", "n", "accuracy_ci95", "ece", "longer_chosen_rate", "reward_length_spearman"]
    for m in [saved["overall"], *saved["subsets"].values()]:
        assert all(k in m for k in fields)
        lo, hi = m["accuracy_ci95"]
        assert lo <= m["accuracy"] <= hi
    assert sum(b["n"] for b in saved["calibration"]["bins"]) == 60
    assert sum(b["n"] for b in saved["length_bins"]["overall"]) == 60
    assert saved["eval"]["pairs_dropped_too_long"] == 0 and saved["eval"]["processes"] == 1


@pytest.mark.slow
def test_rewards_and_accuracy_match_plain_transformers(report, exported_tiny, synthetic_root):
    """An independent reference: plain transformers scores each whole conversation, unpadded."""
    out, result = report
    rows = [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]
    pairs = load_pairs(str(synthetic_root), "test", [])
    assert [r["origin"] for r in rows] == [p.origin for p in pairs]  # every pair, once, in input order
    tok = AutoTokenizer.from_pretrained(exported_tiny)
    hf = AutoModelForSequenceClassification.from_pretrained(exported_tiny).eval()
    with torch.no_grad():
        ref = [[hf(**tok(p.prompt + t, return_tensors="pt")).logits[0, 0].item() for t in (p.chosen, p.rejected)]
               for p in pairs]  # fmt: skip
    got = [[r["chosen_reward"], r["rejected_reward"]] for r in rows]
    assert np.allclose(got, ref, atol=1e-5)
    ref_acc = np.mean([1.0 if c > r else 0.5 if c == r else 0.0 for c, r in ref])
    assert result["overall"]["accuracy"] == pytest.approx(ref_acc)
    for name, m in result["subsets"].items():
        sub = [(c, r) for (c, r), p in zip(ref, pairs, strict=True) if p.subset == name]
        assert m["accuracy"] == pytest.approx(np.mean([1.0 if c > r else 0.0 for c, r in sub]))
        c, r = np.array(sub).T
        assert m["ece"] == pytest.approx(metrics.ece(c, r))
        assert m["longer_chosen_rate"] == pytest.approx(
            np.mean([len(p.chosen) > len(p.rejected) for p in pairs if p.subset == name])
            + 0.5 * np.mean([len(p.chosen) == len(p.rejected) for p in pairs if p.subset == name])
        )


def test_intervals_are_reproducible_under_the_seed(report, synthetic_root):
    out, result = report
    pairs = load_pairs(str(synthetic_root), "test", [])
    rows = [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]
    c = np.array([r["chosen_reward"] for r in rows])
    r = np.array([r["rejected_reward"] for r in rows])
    again = build_result(pairs, [np.array(x) for x in zip(c, r, strict=True)], samples=300, seed=1)
    assert again["overall"]["accuracy_ci95"] == result["overall"]["accuracy_ci95"]
    assert {k: m["accuracy_ci95"] for k, m in again["subsets"].items()} == {
        k: m["accuracy_ci95"] for k, m in result["subsets"].items()
    }
    # Each subset is resampled with the run's seed on its own prompts only (the synthetic test split repeats
    # two prompts: their pairs are drawn together), so adding a subset elsewhere leaves its interval unchanged.
    for name, m in result["subsets"].items():
        mask = np.array([p.subset == name for p in pairs])
        right = metrics.correct(c[mask], r[mask])
        prompt = np.unique([p.prompt for p in pairs if p.subset == name], return_inverse=True)[1]
        sums, counts = np.bincount(prompt, right), np.bincount(prompt).astype(float)
        assert m["accuracy_ci95"] == list(ratio_bootstrap_ci(sums, counts, 300, seed=1))
        if len(sums) == len(right):  # a prompt per pair: the pairwise interval, draw for draw
            assert m["accuracy_ci95"] == list(metrics.bootstrap_ci(right, 300, seed=1))
    assert len({p.prompt for p in pairs}) < len(pairs)  # the repeats above are there


def test_holdout_selects_exactly_the_training_eval_set(synthetic_root):
    """`--holdout 0.2 --split-seed 5` must give the pairs a run with eval_fraction=0.2, split_seed=5 held out
    (the flags mapped onto a DataConfig by the CLI, as `rm eval` maps them)."""
    cfg = DataConfig(source=str(synthetic_root), eval_split="", eval_fraction=0.2, split_seed=5, max_eval_pairs=17)
    _, held = load_splits(cfg, synthetic_root)
    flags = ["--split", "train", "--holdout", "0.2", "--split-seed", "5", "--max-pairs", "17"]
    data = eval_data(build_parser().parse_args(["eval", "--model", "m", "--data", str(synthetic_root), *flags]))
    loading = DataReport()
    pairs, how = eval_pairs(data, report=loading), describe_data(data, loading)
    assert [p.origin for p in pairs] == [p.origin for p in held] and len(pairs) == 17
    assert "held-out 0.2" in how and "split seed 5" in how


@pytest.mark.slow
def test_pairs_too_long_are_dropped_and_listed(exported_tiny, synthetic_root, tmp_path):
    """At max_length 40 some synthetic pairs cannot fit: each is listed, and n counts only the rest."""
    result = main(
        str(exported_tiny), DataConfig(source=str(synthetic_root)), tmp_path, EvalOptions(max_length=40, samples=50)
    )
    info = result["eval"]
    assert info["pairs_dropped_too_long"] == len(info["dropped"]) > 0
    assert result["overall"]["n"] + info["pairs_dropped_too_long"] == info["pairs_loaded"] == 60
    kept = {json.loads(line)["origin"] for line in (tmp_path / "rewards.jsonl").read_text().splitlines()}
    assert {shown_text(origin) for origin in kept}.isdisjoint(info["dropped"])  # eval.json shows paths relative
    saved = json.loads((tmp_path / "eval.json").read_text())  # valid JSON: NaN written as null
    assert all(v is None or not (isinstance(v, float) and math.isnan(v)) for v in saved["overall"].values())


def test_eval_cli_reports_bad_data_and_models(exported_tiny, synthetic_root, tmp_path, capsys):
    """In-process through `rm.cli.main` (the subprocess path is covered by the multi-process test)."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"chosen": "\\n\\nHuman: a\\n\\nAssistant: b"}\n')

    def run(model, data):
        return cli_main(["eval", "--model", str(model), "--data", str(data), "--out", str(tmp_path)])

    assert run(exported_tiny, bad) == 2
    assert "bad.jsonl:1: field 'rejected' is missing" in capsys.readouterr().err
    assert run(tmp_path / "no-model", synthetic_root) == 2
    assert "no-model: cannot load" in capsys.readouterr().err
