"""`rm eval --model A B C [--merged M]`: the ensemble block of eval.json against numpy on each model's `rm score`
rewards of the same pairs, identical members (std 0, an undefined AUC), and members refused in one line."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import tiny_model
from rm.cli import main as cli_main
from rm.config import RunConfig
from rm.data.data_report import shown_text
from rm.evaluation.metrics import correct
from rm.export.folder import Weights, export_model

SEEDS = (0, 1, 2)
SAMPLES = ["--bootstrap-samples", "200", "--seed", "5"]
TOL = 1e-6
"""How far `rm eval`'s rewards may be from `rm score`'s (two layouts of one forward in float32: 6e-8 seen)."""


def export(tokenizer, out: Path, seed: int = 0, state: dict | None = None, cfg: RunConfig | None = None) -> Path:
    """A tiny random Llama seeded `seed` (or with the weights `state`), exported as rm exports a run."""
    model = tiny_model(tokenizer, seed=seed)
    if state is not None:
        model.load_state_dict(state)
    return export_model(model, tokenizer, out, cfg or RunConfig(), Weights(None, None))


@pytest.fixture(scope="module")
def models(tokenizer, tmp_path_factory) -> dict[str, Path]:
    """Three members of different seeds, `merged` (their weights averaged, as a weight-averaging merge of them),
    and three exports of one seed (identical members)."""
    root = tmp_path_factory.mktemp("ensemble")
    out = {f"seed{s}": export(tokenizer, root / f"seed{s}", s) for s in SEEDS}
    states = [tiny_model(tokenizer, seed=s).state_dict() for s in SEEDS]
    average = {k: sum(state[k] for state in states) / len(states) for k in states[0]}
    out["merged"] = export(tokenizer, root / "merged", state=average)
    out |= {f"same{i}": export(tokenizer, root / f"same{i}", 0) for i in range(3)}
    return out


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]


def scored(model: Path, data: Path, folder: Path) -> dict[str, tuple[float, float]]:
    """`rm score`'s (chosen, rejected) rewards of every pair of the data's test split, by origin (file:line)."""
    rewards = {}
    for file in sorted(data.glob("*/test.jsonl.gz")):
        out = folder / f"{model.name}-{file.parent.name}.jsonl"
        assert cli_main(["score", "--model", str(model), "--input", str(file), "--out", str(out)]) == 0
        for line, row in enumerate((json.loads(x) for x in out.read_text().splitlines()), 1):
            rewards[f"{file}:{line}"] = (row["chosen_reward"], row["rejected_reward"])
    return rewards


def saved_name(model: Path) -> str:
    """A model's name as eval.json writes paths (rm/data/data_report.py's `shown_text`)."""
    return shown_text(str(model))


def accuracy(margin: np.ndarray) -> float:
    return float(correct(margin, np.zeros_like(margin)).mean())


@pytest.mark.slow
def test_the_ensemble_block_against_numpy_on_rm_score_rewards(models, synthetic_root, tmp_path, capsys):
    members = [models[f"seed{s}"] for s in SEEDS]
    out = tmp_path / "eval"
    argv = ["eval", "--model", *map(str, members), "--merged", str(models["merged"]), "--data", str(synthetic_root)]
    assert cli_main([*argv, "--out", str(out), "--uncertainty-k", "0.5", *SAMPLES]) == 0
    printed = capsys.readouterr().out
    saved, rows = json.loads((out / "eval.json").read_text()), rows_of(out)
    block = saved["ensemble"]

    # The reference: each model's `rm score` rewards of the same pairs, in rewards.jsonl's order ([pairs, 2]).
    refs = [scored(m, synthetic_root, tmp_path) for m in [*members, models["merged"]]]
    r = np.array([[ref[row["origin"]] for row in rows] for ref in refs])  # [model, pairs, 2]
    members_r, merged_r = r[: len(members)], r[-1]
    mean, std = members_r.mean(0), members_r.std(0, ddof=0)
    conservative = mean - 0.5 * std

    def column(stat: str) -> np.ndarray:  # rewards.jsonl's chosen and rejected KEY_stat: [pairs, 2 (, M)]
        return np.array([[row[f"chosen_reward_{stat}"], row[f"rejected_reward_{stat}"]] for row in rows])

    assert np.allclose(column("members"), members_r.transpose(1, 2, 0), rtol=0, atol=TOL)
    assert np.allclose([[row["chosen_reward"], row["rejected_reward"]] for row in rows], mean, rtol=0, atol=TOL)
    assert np.array_equal(column("mean"), [[row["chosen_reward"], row["rejected_reward"]] for row in rows])
    assert np.allclose(column("std"), std, rtol=0, atol=TOL)
    assert np.allclose(column("conservative"), conservative, rtol=0, atol=TOL)
    assert np.allclose(column("merged"), merged_r, rtol=0, atol=TOL)

    margins = {"members": members_r[..., 0] - members_r[..., 1], "mean": mean[:, 0] - mean[:, 1]}
    margins |= {"conservative": conservative[:, 0] - conservative[:, 1], "merged": merged_r[:, 0] - merged_r[:, 1]}
    # Each reward within TOL of rm score's, so a margin within 2 TOL (3 TOL for mean - 0.5 std) and a margin's std
    # within 2 TOL: no margin is so close to 0, and no two stds so close, that a count could differ.
    assert min(np.abs(m).min() for m in margins.values()) > 4 * TOL
    subsets = np.array([row["subset"] for row in rows])
    expected = {
        **{f"member {m}": margins["members"][m] for m in range(len(members))},
        **{name: margins[name] for name in ("mean", "conservative", "merged")},
    }
    got = {f"member {m}": b for m, b in enumerate(block["members"])} | {
        name: block[name] for name in ("mean", "conservative", "merged")
    }
    for name, margin in expected.items():
        assert got[name]["overall"]["accuracy"] == pytest.approx(accuracy(margin)), name
        assert got[name]["overall"]["n"] == len(rows)
        for subset in set(subsets):
            assert got[name]["subsets"][subset]["accuracy"] == pytest.approx(accuracy(margin[subsets == subset]))
    assert [b["model"] for b in block["members"]] == [saved_name(m) for m in members]
    assert block["conservative"]["k"] == 0.5
    # The top-level numbers are the mean's: what a tool reading eval.json for one model reads.
    assert (
        saved["overall"]["accuracy"]
        == block["mean"]["overall"]["accuracy"]
        == pytest.approx(accuracy(mean[:, 0] - mean[:, 1]))
    )
    assert saved["overall"]["mean_margin"] == pytest.approx(float((mean[:, 0] - mean[:, 1]).mean()), abs=1e-6)

    # Uncertainty: the std over members of each pair's margin; its AUC, counted pair by pair (Mann-Whitney),
    # for the pairs the mean orders wrongly against those it orders right.
    pair_std = margins["members"].std(0, ddof=0)
    wrong, right = margins["mean"] < 0, margins["mean"] > 0
    gaps = np.abs(pair_std[wrong][:, None] - pair_std[right][None, :])
    assert gaps.min() > 4 * TOL
    auc = float((pair_std[wrong][:, None] > pair_std[right][None, :]).mean())
    u = block["uncertainty"]
    assert (u["pairs_wrong"], u["pairs_right"], u["pairs_tied"]) == (wrong.sum(), right.sum(), 0)
    assert u["auc"] == pytest.approx(auc, abs=1e-12) and u["note"] is None
    assert u["mean_std_wrong"] == pytest.approx(pair_std[wrong].mean(), abs=1e-6)
    assert block["reward_std"]["max"] == pytest.approx(std.max(), abs=1e-6)

    md = (out / "report.md").read_text()
    section = md[md.index("## Ensemble") : md.index("## Accuracy")]
    for name in (*(saved_name(m) for m in members), saved_name(models["merged"]), "mean - 0.5 std"):
        assert f"| {name} |" in section, name
    assert f"AUC {u['auc']:.3f}" in section
    assert '<table id="ensemble"' in (out / "report.html").read_text()
    assert "mean - 0.5 std" in printed and f"AUC {u['auc']:.3f}" in printed


@pytest.mark.slow
def test_each_member_s_accuracy_and_interval_are_rm_eval_s_of_that_member(models, synthetic_root, tmp_path):
    members = [str(models[f"seed{s}"]) for s in SEEDS[:2]]
    data = ["--data", str(synthetic_root), *SAMPLES]
    assert cli_main(["eval", "--model", *members, "--out", str(tmp_path / "both"), *data]) == 0
    block = json.loads((tmp_path / "both" / "eval.json").read_text())["ensemble"]
    assert block["merged"] is None
    for member, got in zip(members, block["members"], strict=True):
        assert cli_main(["eval", "--model", member, "--out", str(tmp_path / "one"), *data]) == 0
        one = json.loads((tmp_path / "one" / "eval.json").read_text())
        assert got["overall"] == {k: one["overall"][k] for k in ("accuracy", "accuracy_ci95", "n")}
        assert got["subsets"] == {
            name: {k: m[k] for k in ("accuracy", "accuracy_ci95", "n")} for name, m in one["subsets"].items()
        }


@pytest.mark.slow
def test_identical_members_have_std_zero_and_no_auc(models, synthetic_root, tmp_path):
    same = [str(models[f"same{i}"]) for i in range(3)]
    out = tmp_path / "same"
    assert cli_main(["eval", "--model", *same, "--data", str(synthetic_root), "--out", str(out), *SAMPLES]) == 0
    block = json.loads((out / "eval.json").read_text())["ensemble"]
    rows = rows_of(out)
    assert all(row["chosen_reward_std"] == row["rejected_reward_std"] == 0.0 for row in rows)
    assert all(row["chosen_reward"] == row["chosen_reward_members"][0] for row in rows)  # the mean is each member
    assert all(row["chosen_reward_conservative"] == row["chosen_reward"] for row in rows)
    assert block["reward_std"] == {"mean": 0.0, "max": 0.0}
    u = block["uncertainty"]
    assert u["auc"] is None and "same std over members (0)" in u["note"]
    assert u["pairs_wrong"] + u["pairs_right"] + u["pairs_tied"] == len(rows)
    accuracies = {b["overall"]["accuracy"] for b in [*block["members"], block["mean"], block["conservative"]]}
    assert len(accuracies) == 1
    assert "undefined: every pair has the same std" in (out / "report.md").read_text()


@pytest.mark.slow
def test_members_that_differ_are_refused_in_one_line(models, exported_tiny, attribute_export, synthetic_root,
                                                    tokenizer, tmp_path, capsys):  # fmt: skip
    from rm.tokens.tokenizer import train_bpe

    other = train_bpe(["a different vocabulary", "for another tokenizer"] * 20, vocab_size=300)
    short = RunConfig()
    short.collator.max_length = 64
    odd = {
        "tokenizer": export(other, tmp_path / "other-tokenizer"),
        "max_length": export(tokenizer, tmp_path / "short", cfg=short),
        "outputs": attribute_export,
    }
    data = ["--data", str(synthetic_root), "--out", str(tmp_path / "out")]

    def refused(*argv: str) -> str:
        assert cli_main(["eval", *argv, *data]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "Traceback" not in err, err
        return lines[0]

    first = str(models["seed0"])
    line = refused("--model", first, str(odd["tokenizer"]))
    assert line.startswith("error: rm eval: ") and "differ in their tokenizer" in line
    assert "differ in their max_length (512 against 64); give them one --max-length" in refused(
        "--model", first, str(odd["max_length"])
    )
    assert "differ in their outputs" in refused("--model", first, str(odd["outputs"]))
    merged = refused("--model", first, str(models["seed1"]), "--merged", str(odd["tokenizer"]))
    assert "differ in their tokenizer" in merged and "other-tokenizer" in merged
    # The hint works: one --max-length for both, and the ensemble is scored.
    assert cli_main(["eval", "--model", first, str(odd["max_length"]), "--max-length", "64", *data]) == 0
    assert "--suite scores one model" in refused("--model", first, first, "--suite", "rewardbench")
    assert "give two or more --model" in refused("--model", first, "--merged", first)
    assert "--uncertainty-k must be a number >= 0" in refused("--model", first, first, "--uncertainty-k", "-1")


def test_model_takes_several_values_and_overrides_after_them():
    from rm.cli import build_parser, parse
    from rm.cli.evaluate import settle_eval

    flags = settle_eval(parse(build_parser(), ["eval", "--model", "a", "b", "batch_size=3", "--data", "d"]))
    assert flags.model == ["a", "b"] and flags.batch_size == 3
    flags = settle_eval(parse(build_parser(), ["eval", "--model", "a", "--model", "b", "--merged", "m", "--data", "d"]))
    assert flags.model == ["a", "b"] and flags.merged == "m" and flags.uncertainty_k == 1.0


@pytest.mark.slow
def test_an_ensemble_of_groups_against_plain_transformers(models, tmp_path):
    """RewardBench 2's groups (K = 4, ties among the chosen and among the rejected): each member's reward of every
    response from plain transformers, their mean and std per response, and the group metrics of the mean."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rm.data.load import load_pairs
    from rm.evaluation.ranking_metrics import group_summary

    source = Path(__file__).parent.parent / "fixtures" / "rewardbench2.jsonl"
    members = [models["seed0"], models["seed1"]]
    argv = ["eval", "--model", *map(str, members), "--data", str(source), "--out", str(tmp_path), *SAMPLES]
    assert cli_main(argv) == 0
    items = load_pairs(str(source), "test", [])
    refs = []
    for member in members:
        tok = AutoTokenizer.from_pretrained(member)
        hf = AutoModelForSequenceClassification.from_pretrained(member).eval()
        with torch.no_grad():
            refs.append([[hf(**tok(g.prompt + t, return_tensors="pt")).logits[0, 0].item() for t in g.responses]
                         for g in items])  # fmt: skip
    rows = rows_of(tmp_path)
    for k, (row, g) in enumerate(zip(rows, items, strict=True)):
        each = np.array([ref[k] for ref in refs])  # [M, K]
        assert np.allclose(row["rewards_members"], each.T, rtol=0, atol=TOL)
        assert np.allclose(row["rewards"], each.mean(0), rtol=0, atol=TOL) and row["rewards_mean"] == row["rewards"]
        assert np.allclose(row["rewards_std"], each.std(0), rtol=0, atol=TOL) and row["rank"] == list(g.rank)
    saved = json.loads((tmp_path / "eval.json").read_text())
    mean = [np.mean([ref[k] for ref in refs], 0) for k in range(len(items))]
    want = group_summary(mean, [np.array(g.rank) for g in items], samples=100)
    for key in ("accuracy", "n", "top1_accuracy", "best_of_k_accuracy", "tied_pairs"):
        assert saved["overall"][key] == pytest.approx(want[key]), key
    block = saved["ensemble"]
    for member, ref in zip(block["members"], refs, strict=True):
        mine = group_summary([np.array(r) for r in ref], [np.array(g.rank) for g in items], samples=100)
        assert member["overall"]["accuracy"] == pytest.approx(mine["accuracy"]) and member["overall"]["n"] == 7
    u = block["uncertainty"]
    assert u["pairs_wrong"] + u["pairs_right"] + u["pairs_tied"] == 7  # the strict pairs; tied ones are in no count


def test_the_mean_s_chosen_and_rejected_are_taken_from_its_rewards_as_gathering_takes_them():
    """`combined_columns`: the mean's gathered `chosen` and `rejected` (what soft calibration and the registered
    labels' metrics read) are the mean rewards of each strict comparison's two responses, ties left out. Two
    groups: a pair (responses 0, 1), and three responses (2, 3, 4) with 2 > 3, 2 > 4 and 3 tied with 4."""
    from rm.evaluation.ensemble.ensemble_eval import combined_columns

    data = {
        "index": torch.tensor([0, 1]), "subset": torch.tensor([0, 0]), "group": torch.tensor([0, 0, 1, 1, 1]),
        "slot": torch.tensor([0, 1, 0, 1, 2]), "rank": torch.tensor([0, 1, 0, 1, 1]),
        "pair_group": torch.tensor([0, 1, 1, 1]), "a": torch.tensor([0, 0, 0, 1]), "b": torch.tensor([1, 1, 2, 2]),
        "tie": torch.tensor([False, False, False, True]),
    }  # fmt: skip
    rewards = [torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), torch.tensor([3.0, 0.0, 1.0, 8.0, -1.0])]
    members = [data | {"reward": r, "chosen": r[[0, 2, 2]], "rejected": r[[1, 3, 4]]} for r in rewards]
    mean, std, conservative = combined_columns(members, k=1.0)
    assert mean["reward"].tolist() == [2.0, 1.0, 2.0, 6.0, 2.0]
    assert mean["chosen"].tolist() == [2.0, 2.0, 2.0] and mean["rejected"].tolist() == [1.0, 6.0, 2.0]
    assert std.tolist() == [1.0, 1.0, 1.0, 2.0, 3.0] and conservative.tolist() == [1.0, 0.0, 1.0, 4.0, -1.0]
