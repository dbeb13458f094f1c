"""A model whose rewards overflow: `rm eval` wrote -Infinity to eval.json and NaN to rewards.jsonl, then
crashed in plotting with no report.md; `rm score` wrote NaN with rc 0 and no word. Now a non-finite reward is
counted, said in one line, written as null, and left out of the metrics, whose count eval.json holds."""

import json
import logging
import math
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rm.cli import main as cli_main
from rm.config import DataConfig
from rm.data.data_report import shown_text
from rm.data.formats.group import Group
from rm.data.formats.pair import Pair
from rm.data.load import load_pairs
from rm.evaluation import metrics
from rm.evaluation.eval_report import GROUP_PLOT, PLOTS, EvalOptions, evaluate_model, write_report
from rm.evaluation.eval_result import build_result

UNIT, SCALE = 3, 3e38
"""The reward head reads hidden unit 3 alone, times 3e38: a reward overflows float32 to +-inf where that unit
exceeds 1.13 in size (a fifth of the synthetic test responses; the largest finite one is 0.94), and is finite
elsewhere. One weight, so no sum of infinities of both signs makes a NaN: each reward is finite or +-inf."""


@pytest.fixture(scope="module")
def overflowing(exported_tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("overflow") / "export"
    shutil.copytree(exported_tiny, out)
    weights = load_file(out / "model.safetensors")
    head = torch.zeros_like(weights["score.weight"])
    head[0, UNIT] = SCALE
    save_file(weights | {"score.weight": head}, out / "model.safetensors", metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def reference(overflowing, synthetic_root):
    """Each test pair's (chosen, rejected) rewards from plain transformers on the whole conversation, unpadded."""
    tok = AutoTokenizer.from_pretrained(overflowing)
    hf = AutoModelForSequenceClassification.from_pretrained(overflowing).eval()
    pairs = load_pairs(str(synthetic_root), "test", [])
    with torch.no_grad():
        rewards = [[hf(**tok(p.prompt + t, return_tensors="pt")).logits[0, 0].item() for t in (p.chosen, p.rejected)]
                   for p in pairs]  # fmt: skip
    return pairs, np.array(rewards)


@pytest.mark.slow
def test_eval_counts_nonfinite_rewards_leaves_them_out_and_still_writes_the_report(
    overflowing, reference, synthetic_root, tmp_path, caplog
):
    pairs, ref = reference
    finite = np.isfinite(ref)
    assert 0 < (~finite).sum() < ref.size and not np.isnan(ref).any()  # a mix of finite and +-inf rewards
    out = tmp_path / "eval"
    args = ["eval", "--model", str(overflowing), "--data", str(synthetic_root), "--out", str(out)]
    with caplog.at_level(logging.WARNING, logger="rm"):
        assert cli_main([*args, "--bootstrap-samples", "50"]) == 0
    said = [r.getMessage() for r in caplog.records if "not finite" in r.getMessage()]
    assert said == [f"warning: {(~finite).sum()} of 120 rewards are not finite (NaN or infinite) in "
                    f"{(~finite.all(1)).sum()} of 60 items: left out of the metrics, null in rewards.jsonl, listed in "
                    "eval.json"]  # fmt: skip

    text = (out / "eval.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    saved = json.loads(text)
    info = saved["eval"]
    assert info["rewards_nonfinite"] == (~finite).sum()
    assert info["nonfinite"] == [shown_text(p.origin) for p, ok in zip(pairs, finite.all(1), strict=True) if not ok]
    # The metrics are those of the pairs both of whose rewards are finite, and of them only.
    kept = finite.all(1)
    c, r = ref[kept].T
    overall = saved["overall"]
    assert overall["n"] == kept.sum()
    assert overall["accuracy"] == pytest.approx(metrics.correct(c, r).mean())
    assert overall["mean_chosen_reward"] == pytest.approx(c.mean(), rel=1e-5)

    rows = [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]
    assert [r["origin"] for r in rows] == [p.origin for p in pairs]
    got = np.array([[math.nan if v is None else v for v in (r["chosen_reward"], r["rejected_reward"])] for r in rows])
    assert np.array_equal(np.isnan(got), ~finite)  # null exactly where the model overflowed
    assert np.allclose(got[finite] / SCALE, ref[finite] / SCALE, atol=1e-5)  # the hidden unit, as test_eval.py
    for name in ["report.md", *PLOTS]:
        assert (out / name).is_file(), name


@pytest.mark.slow
def test_score_writes_null_for_a_nonfinite_reward_and_counts_it_in_one_line(overflowing, reference, tmp_path, capsys):
    """rc 0: the file is complete and valid JSON, each null marks its own record, and stderr gives the count."""
    pairs, ref = reference
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": p.prompt + p.chosen}) + "\n" for p in pairs))
    out = tmp_path / "out.jsonl"
    assert cli_main(["score", "--model", str(overflowing), "--input", str(src), "--out", str(out)]) == 0
    bad = ~np.isfinite(ref[:, 0])
    err = [line for line in capsys.readouterr().err.splitlines() if "not finite" in line]
    assert len(err) == 1 and err[0].startswith(f"warning: {bad.sum()} rewards in {bad.sum()} records are not finite")
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    rewards = [json.loads(line)["reward"] for line in text.splitlines()]
    assert [v is None for v in rewards] == bad.tolist()


@pytest.mark.slow
def test_eval_of_a_model_whose_every_reward_is_nan_still_writes_every_file(exported_tiny, synthetic_root, tmp_path):
    """Every head weight infinite: each reward a sum of infinities of both signs, NaN. No pair
    is left to measure: eval.json says n 0 and null metrics, and report.md and the plots are still written."""
    export = tmp_path / "export"
    shutil.copytree(exported_tiny, export)
    weights = load_file(export / "model.safetensors")
    head = torch.full_like(weights["score.weight"], math.inf)
    save_file(weights | {"score.weight": head}, export / "model.safetensors", metadata={"format": "pt"})
    result = evaluate_model(
        str(export), DataConfig(source=str(synthetic_root)), tmp_path / "eval", EvalOptions(samples=20)
    )
    saved = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert saved["eval"]["rewards_nonfinite"] == 120 and len(saved["eval"]["nonfinite"]) == 60
    assert saved["overall"]["n"] == 0 and saved["overall"]["accuracy"] is None
    assert result["overall"]["n"] == 0
    for name in ["report.md", "rewards.jsonl", *PLOTS]:
        assert (tmp_path / "eval" / name).is_file(), name


@pytest.mark.slow
def test_groups_whose_every_reward_is_nonfinite_are_left_out_of_the_group_metrics(tmp_path):
    """As NaN in `item_rewards`, a group of which nothing finite is left has no top-1, best-of-K or tau; the last
    group empty once made `reduceat` read past the end. The rest score as if the empty ones were not there."""
    nan = math.nan
    items = [
        Group("p0", ("a", "bb", "ccc"), (0, 1, 2), "a", origin="f:0"),
        Group("p1", ("a", "bb", "ccc"), (0, 1, 1), "a", origin="f:1"),
        Group("p2", ("a", "bb", "ccc", "dddd"), (0, 1, 2, 3), "b", origin="f:2"),
        Pair("p3", "xx", "y", "b", origin="f:3"),
    ]
    rewards = [np.array([3.0, 1, 2]), np.array([nan, nan, nan]), np.array([4.0, 1, 3, 2]), np.array([nan, nan])]
    got = build_result(items, rewards, samples=50, seed=0)
    want = build_result([items[0], items[2]], [rewards[0], rewards[2]], samples=50, seed=0)
    for key in ("n", "accuracy", "top1_accuracy", "best_of_k_accuracy", "kendall_tau", "accuracy_ci95"):
        assert got["overall"][key] == want["overall"][key], key
    result = got | {"eval": {"model": "m", "data": "d", "pairs_loaded": 4, "records_skipped": {}, "max_length": 64,
                             "pairs_dropped_too_long": 0, "prompts_truncated": 0, "length_unit": "characters",
                             "bootstrap": {"method": "percentile", "samples": 50, "seed": 0}}}  # fmt: skip
    write_report(tmp_path, result, items, rewards, seed=0)
    rows = [json.loads(line) for line in (tmp_path / "rewards.jsonl").read_text().splitlines()]
    assert rows[1]["rewards"] == [None] * 3 and rows[3]["chosen_reward"] is None
    assert all((tmp_path / name).is_file() for name in ["report.md", GROUP_PLOT, *PLOTS])
