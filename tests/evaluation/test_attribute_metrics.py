"""eval.json's `attributes` numbers (rm/evaluation/attribute_metrics.py) against hand computations, and training's
eval (`rm.evaluation.gather.evaluate`) of a tiny model with attribute outputs against separate forwards."""

import math

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from rm.collate.padded import PaddedCollator
from rm.evaluation.attribute_metrics import attribute_block, fit_numbers, pearson, spearman
from rm.evaluation.gather import evaluate
from rm.evaluation.metrics import rankdata
from rm.model.reward import RewardModel
from rm.tokens.store import EncodedGroup
from rm.training.console import format_table

NAN = float("nan")


def test_average_ranks_share_the_mean_rank_of_ties():
    assert rankdata(np.array([1.0, 5.0, 5.0, 2.0])).tolist() == [1.0, 3.5, 3.5, 2.0]
    assert rankdata(np.array([3.0, 3.0, 3.0])).tolist() == [2.0, 2.0, 2.0]
    assert rankdata(np.array([0.5, -1.0, 2.0, 0.5, 0.5])).tolist() == [3.0, 1.0, 5.0, 3.0, 3.0]


def test_spearman_with_ties_by_hand():
    """x = [1, 2, 2, 3] ranks [1, 2.5, 2.5, 4]; y = [1, 3, 2, 4] ranks [1, 3, 2, 4]. Both mean 2.5, so the rank
    deviations are [-1.5, 0, 0, 1.5] and [-1.5, 0.5, -0.5, 1.5]: sum of products 4.5, squares 4.5 and 5, and
    rho = 4.5 / sqrt(4.5 * 5) = 0.9486833. (scipy.stats.spearmanr gives the same; it is not installed here.)"""
    assert spearman(np.array([1.0, 2, 2, 3]), np.array([1.0, 3, 2, 4])) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman(np.array([1.0, 2, 3]), np.array([10.0, 20, 30])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2, 3]), np.array([9.0, 4, 1])) == pytest.approx(-1.0)


def test_pearson_by_hand_and_undefined_cases():
    """x = [0, 1, 2], y = [0, 1, 5]: deviations [-1, 0, 1] and [-2, -1, 3]; products 5, squares 2 and 14."""
    assert pearson(np.array([0.0, 1, 2]), np.array([0.0, 1, 5])) == pytest.approx(5 / math.sqrt(28))
    assert math.isnan(pearson(np.array([1.0, 1, 1]), np.array([0.0, 1, 2])))  # a constant output
    assert math.isnan(pearson(np.array([1.0]), np.array([2.0])))  # one point
    assert math.isnan(spearman(np.array([]), np.array([])))


def test_fit_numbers_skip_and_count_missing_scores():
    """Scored: outputs [1, 2, 4] against scores [1, 3, 3]; errors 0, -1, 1, RMSE sqrt(2/3)."""
    got = fit_numbers(np.array([1.0, 2.0, 9.0, 4.0, NAN]), np.array([1.0, 3.0, NAN, 3.0, 2.0]))
    assert got["n"] == 3 and got["missing"] == 1  # the NaN output is skipped too, not counted as missing
    assert got["rmse"] == pytest.approx(math.sqrt(2 / 3))
    assert got["pearson"] == pytest.approx(pearson(np.array([1.0, 2, 4]), np.array([1.0, 3, 3])))
    # ranks [1, 2, 3] and [1, 2.5, 2.5]: deviations [-1, 0, 1] and [-1, 0.5, 0.5]; 1.5 / sqrt(2 * 1.5)
    assert got["spearman"] == pytest.approx(1.5 / math.sqrt(3))
    empty = fit_numbers(np.array([1.0]), np.array([NAN]))
    assert (empty["n"], empty["missing"]) == (0, 1) and math.isnan(empty["rmse"])


def test_attribute_block_per_subset():
    pred = np.array([[1.0, 0.0], [2.0, 1.0], [3.0, 5.0], [4.0, 2.0]])
    true = np.array([[1.0, NAN], [2.0, 2.0], [4.0, 1.0], [3.0, 0.0]])
    block = attribute_block(pred, true, np.array([0, 0, 1, 1]), ["a", "b"], ["s", "t"])
    assert list(block) == ["a", "b"] and list(block["a"]["subsets"]) == ["s", "t"]
    assert block["a"]["subsets"]["s"]["rmse"] == 0.0 and block["a"]["subsets"]["t"]["rmse"] == 1.0
    assert block["a"]["subsets"]["t"]["spearman"] == pytest.approx(-1.0)
    assert block["b"]["overall"]["n"] == 3 and block["b"]["overall"]["missing"] == 1
    assert block["b"]["subsets"]["s"]["n"] == 1 and math.isnan(block["b"]["subsets"]["s"]["pearson"])


def test_training_eval_reports_attributes_equal_to_separate_forwards(tokenizer):
    """`evaluate` (training's eval) on a model with 1 + 2 outputs: the attribute block equals `attribute_block`
    of each response's outputs from a forward of its own, and the reward metrics are those of output 0."""
    from rm.config import ModelConfig, RandomInitConfig
    from rm.model.build import build_model

    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    cfg = ModelConfig(random_init=RandomInitConfig(model_type="llama", **shape))
    cfg.head.attributes = ["x", "y"]
    torch.manual_seed(0)
    model = RewardModel(build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).eval())
    rng = np.random.default_rng(1)
    groups = []
    for i in range(10):
        responses = [rng.integers(3, 300, int(rng.integers(1, 6))).tolist() for _ in range(2)]
        scores = rng.integers(0, 5, 4).astype(float)
        if i % 3 == 0:
            scores[3] = NAN  # response 1's y: missing
        groups.append(EncodedGroup(rng.integers(3, 300, 4).tolist(), responses, [0, 1], i % 2, index=i,
                                   prompt_id=i, attributes=scores.tolist()))  # fmt: skip
    loader = DataLoader(groups, batch_size=3, collate_fn=PaddedCollator(tokenizer.pad_token_id))
    result = evaluate(model, loader, Accelerator(cpu=True), ["s", "t"])
    with torch.no_grad():
        outs = [
            model(input_ids=torch.tensor([list(g.prompt_ids) + r]), attention_mask=torch.ones(1, 4 + len(r)))[0]
            for g in groups
            for r in g.response_ids
        ]
    outs = torch.stack(outs).double().numpy()  # [20, 3]
    true = np.array([g.attributes for g in groups]).reshape(20, 2)
    want = attribute_block(outs[:, 1:], true, np.repeat([g.subset_id for g in groups], 2), ["x", "y"], ["s", "t"])
    for name in ("x", "y"):
        for got, exp in [(result["attributes"][name]["overall"], want[name]["overall"])] + [
            (result["attributes"][name]["subsets"][s], want[name]["subsets"][s]) for s in ("s", "t")
        ]:
            assert (got["n"], got["missing"]) == (exp["n"], exp["missing"])
            for key in ("rmse", "pearson", "spearman"):
                assert got[key] == pytest.approx(exp[key], abs=1e-5)
    assert result["attributes"]["y"]["overall"]["missing"] == 4
    assert format_table(result).splitlines()[-1].startswith("y ")  # training's console summary
    chosen, rejected = outs[0::2, 0], outs[1::2, 0]
    assert result["overall"]["accuracy"] == pytest.approx(np.mean(chosen > rejected))
