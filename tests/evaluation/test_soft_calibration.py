"""Calibration of the soft-label probability: eval.json's `soft_calibration` against ECE and Brier worked
out by hand, through training's eval (`evaluate` on batches that carry `pair_target`), absent without soft labels;
and rewards.jsonl's attribute outputs for pairs and K-response groups."""

import math

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from test_eval_groups import TokenReward, group
from torch.utils.data import DataLoader

from rm.collate.padded import PaddedCollator
from rm.data.formats.group import Group
from rm.data.formats.pair import Pair
from rm.evaluation.gather import evaluate
from rm.evaluation.soft_calibration import soft_calibration
from rm.evaluation.split_rewards import reward_rows

LN3 = math.log(3)
"""sigmoid(ln 3) = 3/4 and sigmoid(-ln 3) = 1/4, exactly (up to rounding), away from every bin edge."""
NAN = float("nan")


def test_ece_and_brier_by_hand():
    """P(chosen) per pair: 1/2, 3/4, 3/4, 1/4, with targets 0.5, 1.0, 0.6, 0.5; a hard pair (NaN target) and a pair
    with a NaN reward are left out. Bins: [0.2, 0.3) holds P 1/4 against 0.5, [0.5, 0.6) P 1/2 against 0.5,
    [0.7, 0.8) the two P 3/4 against targets averaging 0.8. ECE = (1 x 0.25 + 1 x 0 + 2 x 0.05) / 4 = 0.0875;
    Brier = (0 + 0.25^2 + 0.15^2 + 0.25^2) / 4 = 0.1475 / 4 = 0.036875."""
    chosen = np.array([1.0, LN3, 2 + LN3, 0.0, LN3, NAN])
    rejected = np.array([1.0, 0.0, 2.0, LN3, 0.0, 0.0])
    target = np.array([0.5, 1.0, 0.6, 0.5, NAN, 0.9])
    got = soft_calibration(chosen, rejected, target)
    assert got["n"] == 4 and got["ece"] == pytest.approx(0.0875) and got["brier"] == pytest.approx(0.036875)
    bins = got["bins"]
    assert len(bins) == 10 and [b["n"] for b in bins] == [0, 0, 1, 0, 0, 1, 0, 2, 0, 0]
    assert (bins[7]["lo"], bins[7]["hi"]) == pytest.approx((0.7, 0.8))
    assert bins[7]["p_mean"] == pytest.approx(0.75) and bins[7]["target_mean"] == pytest.approx(0.8)
    assert bins[2]["p_mean"] == pytest.approx(0.25) and bins[2]["target_mean"] == pytest.approx(0.5)
    assert math.isnan(bins[0]["p_mean"]) and math.isnan(bins[0]["target_mean"])
    # A perfectly calibrated model: its probabilities are the targets.
    exact = soft_calibration(np.array([LN3, 0.0]), np.array([0.0, LN3]), np.array([0.75, 0.25]))
    assert exact["ece"] == pytest.approx(0.0, abs=1e-12) and exact["brier"] == pytest.approx(0.0, abs=1e-12)
    assert soft_calibration(chosen, rejected, np.full(6, NAN)) is None  # hard labels only: no block


def soft_groups(targets: list[float]) -> list:
    """Pairs with rewards (halves, as `TokenReward` reads them) 1.5 - 0, 0 - 0.5, 2 - 1 and 3 - 3, each with its
    soft label (NaN: hard), and a K = 3 group, whose labels are always hard."""
    rewards = [[1.5, 0.0], [0.0, 0.5], [2.0, 1.0], [3.0, 3.0]]
    pairs = [group(r, [0, 1], i) for i, r in enumerate(rewards)]
    for p, t in zip(pairs, targets, strict=True):
        p.target = t
    k3 = group([1.0, 2.0, 0.0], [0, 1, 2], 4)
    k3.target = NAN
    return [*pairs, k3]


def test_training_eval_reports_soft_calibration_of_the_pairs_with_soft_labels():
    """Batches [0, 4] (a soft label and a K = 3 group), [1, 2] (hard only: no `pair_target` in the batch) and [3]."""
    targets = [0.9, NAN, NAN, 0.5]
    groups = soft_groups(targets)
    loader = DataLoader(groups, batch_sampler=[[0, 4], [1, 2], [3]], collate_fn=PaddedCollator(0))
    result = evaluate(TokenReward(), loader, Accelerator(cpu=True), ["a"])
    got = result["soft_calibration"]
    # Pair 0: P = sigmoid(1.5) against 0.9; pair 3: P = 1/2 against 0.5. Bins 8 ([0.8, 0.9)) and 5.
    p0 = 1 / (1 + math.exp(-1.5))
    assert got["n"] == 2 and got["brier"] == pytest.approx(((p0 - 0.9) ** 2 + 0) / 2)
    assert got["ece"] == pytest.approx(abs(p0 - 0.9) / 2) and got["bins"][8]["p_mean"] == pytest.approx(p0)
    assert [b["n"] for b in got["bins"]] == [0, 0, 0, 0, 0, 1, 0, 0, 1, 0]
    # The same eval with hard labels only has no block, and its other numbers are unchanged.
    hard = evaluate(TokenReward(), DataLoader(soft_groups([NAN] * 4), batch_sampler=[[0, 4], [1, 2], [3]],
                    collate_fn=PaddedCollator(0)), Accelerator(cpu=True), ["a"])  # fmt: skip
    assert "soft_calibration" not in hard and hard == {k: v for k, v in result.items() if k != "soft_calibration"}


def test_reward_rows_carry_each_responses_attribute_outputs():
    items = [
        Pair("p", "yes", "no", "a", origin="f:0"),
        Group("q", ("x", "yy", "zzz"), (0, 1, 2), "b", origin="f:1"),
    ]
    rewards = [np.array([1.0, 0.5]), np.array([2.0, NAN, 0.0])]
    outputs = [np.array([[3.0, 0.0], [1.0, 1.0]]), np.array([[1.0, 2.0], [NAN, NAN], [0.5, 1.0]])]
    pair, grouped = reward_rows(items, rewards, (["u", "v"], outputs))
    assert pair["chosen_attributes"] == {"u": 3.0, "v": 0.0} and pair["rejected_attributes"] == {"u": 1.0, "v": 1.0}
    assert grouped["attributes"][0] == {"u": 1.0, "v": 2.0} and grouped["attributes"][2] == {"u": 0.5, "v": 1.0}
    assert all(math.isnan(x) for x in grouped["attributes"][1].values())  # a response too long: null in the file
    plain = reward_rows(items, rewards)
    assert set(plain[0]) == {"origin", "subset", "chosen_reward", "rejected_reward", "chosen_chars", "rejected_chars"}
    assert "attributes" not in plain[1] and plain[1]["rewards"][0] == 2.0


def test_soft_label_columns_survive_a_repeated_group():
    """A group scored twice (as a process short of a batch repeats one) keeps one soft label per pair."""
    groups = soft_groups([0.9, 0.2, NAN, 0.5])
    loader = DataLoader(groups, batch_sampler=[[0, 1], [2, 3, 4], [1]], collate_fn=PaddedCollator(0))
    from rm.evaluation.gather import gather_rewards

    g = gather_rewards(TokenReward(), loader, Accelerator(cpu=True))
    # Strict pairs in split order: pairs 0-2, then the K = 3 group's three (hard); pair 3 is a reward tie, still
    # a strict pair (its label orders it).
    np.testing.assert_array_equal(g["target"].numpy(), np.array([0.9, 0.2, NAN, 0.5, NAN, NAN, NAN], dtype=np.float32))
    assert torch.equal(g["chosen"][:4], torch.tensor([1.5, 0.0, 2.0, 3.0]))


def test_report_shows_the_soft_calibration_table_only_with_soft_labels():
    from test_eval_groups import text_pairs

    from rm.evaluation.eval_result import build_result
    from rm.evaluation.report.html_page import html_table
    from rm.evaluation.report.markdown import render_markdown, soft_table

    items, rewards = text_pairs(12, seed=7)
    result = build_result(items, rewards, samples=20, seed=0)
    result["eval"] = {
        "model": "m", "data": "d", "pairs_loaded": 12, "records_skipped": {}, "pairs_dropped_too_long": 0,
        "prompts_truncated": 0, "max_length": 64, "length_unit": "characters",
        "bootstrap": {"method": "percentile", "samples": 20, "seed": 0},
    }  # fmt: skip
    assert "mean label" not in render_markdown(result)
    result["soft_calibration"] = soft_calibration(
        np.array([LN3, 1.0, 0.0]), np.array([0.0, 1.0, LN3]), np.array([1.0, 0.5, 0.5])
    )
    md = render_markdown(result)
    assert "| 0.7-0.8 | 1 | 0.750 | 1.000 |  |  |" in md and "| 0.2-0.3 | 1 | 0.250 | 0.500 |  |  |" in md
    # ECE (0.25 + 0 + 0.25) / 3, Brier (0.0625 + 0 + 0.0625) / 3.
    assert "| overall | 3 |  |  | 0.167 | 0.042 |" in md
    assert 'id="soft_calibration"' in html_table(soft_table(result["soft_calibration"]), "soft_calibration")


@pytest.mark.slow
def test_rm_eval_of_a_soft_label_run_reports_its_calibration(exported_tiny, tmp_path):
    """`rm eval` of an export whose rm_config.yaml says loss.strength=soft reads each pair's `strength` as that
    run's target (p = 0.5 + s / (2 max)) and writes soft_calibration, here recomputed by hand from rewards.jsonl;
    the same export without soft labels in its config writes none."""
    import json
    import shutil

    import yaml

    from rm.config import DataConfig
    from rm.evaluation.eval_report import EvalOptions, evaluate_model

    strengths = [3, 1, 2, 0, 3, 1, 2, 2]
    src = tmp_path / "pairs.jsonl"
    rows = [
        {"prompt": f"Question {i}?", "chosen": f"Answer {'yes ' * (i + 1)}", "rejected": "No.", "strength": s}
        for i, s in enumerate(strengths)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    soft = tmp_path / "soft"
    shutil.copytree(exported_tiny, soft)
    cfg = yaml.safe_load((soft / "rm_config.yaml").read_text())
    cfg["loss"] = {**(cfg.get("loss") or {}), "strength": "soft", "strength_max": 3}
    (soft / "rm_config.yaml").write_text(yaml.safe_dump(cfg))
    result = evaluate_model(str(soft), DataConfig(source=str(src)), tmp_path / "e", EvalOptions(samples=10))
    got = result["soft_calibration"]
    lines = [json.loads(x) for x in (tmp_path / "e" / "rewards.jsonl").read_text().splitlines()]
    p = [1 / (1 + math.exp(-(x["chosen_reward"] - x["rejected_reward"]))) for x in lines]
    target = [0.5 + rows[int(x["origin"].rsplit(":", 1)[1]) - 1]["strength"] / 6 for x in lines]  # file:line
    bins = [min(int(v * 10), 9) for v in p]
    ece = sum(
        abs(sum(p[i] for i in idx) / len(idx) - sum(target[i] for i in idx) / len(idx)) * len(idx) / len(p)
        for b in set(bins)
        if (idx := [i for i in range(len(p)) if bins[i] == b])
    )
    assert got["n"] == len(strengths) == len(lines)
    assert got["ece"] == pytest.approx(ece, abs=1e-6)
    assert got["brier"] == pytest.approx(np.mean((np.array(p) - np.array(target)) ** 2), abs=1e-6)
    plain = evaluate_model(str(exported_tiny), DataConfig(source=str(src)), tmp_path / "h", EvalOptions(samples=10))
    assert "soft_calibration" not in plain
