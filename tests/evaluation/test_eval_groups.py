"""Eval of groups of K responses: training's `evaluate` and `rm eval`'s numbers on hand-built groups whose metrics are
worked out by hand, a pairwise eval set equal to the pairwise code path key for key, and intervals that resample
prompts. Rewards come from a stand-in model that reads each response's one token as its reward, so every
number below is known before the model runs. Run as a script, this file is the worker of the 2- and 3-process
test (under `accelerate launch`)."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import PretrainedConfig

from rm.collate.padded import PaddedCollator
from rm.collate.planner import PairBatches
from rm.collate.shard import EvalBatches
from rm.data.formats.group import Group
from rm.data.formats.pair import Pair
from rm.evaluation import metrics
from rm.evaluation.attribute_metrics import gathered_block
from rm.evaluation.eval_result import build_result
from rm.evaluation.gather import evaluate, gather_rewards
from rm.evaluation.ranking_metrics import ratio_bootstrap_ci
from rm.evaluation.report.markdown import format_table, has_groups, render_markdown
from rm.evaluation.soft_calibration import gathered_calibration
from rm.evaluation.summary import by_subset, summarize_by_subset, summarize_groups
from rm.tokens.store import EncodedGroup

ZERO = 100
"""Token ZERO + 2x is a response whose reward is x (halves exact in float32)."""


class TokenReward(torch.nn.Module):
    """Reward = (last attended token - ZERO) / 2: a model whose every reward the test chose."""

    def __init__(self):
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(1))  # a module with a parameter, as `evaluate` expects

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        last = attention_mask.sum(1) - 1
        return (input_ids[torch.arange(len(input_ids)), last] - ZERO).float() / 2


class TokenAttributes(TokenReward):
    """`TokenReward`'s reward as output 0, and two attribute outputs made from it, named u and v."""

    def __init__(self):
        super().__init__()
        self.hf = SimpleNamespace(config=PretrainedConfig(id2label={0: "reward", 1: "u", 2: "v"}))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        r = super().forward(input_ids, attention_mask)
        return torch.stack([r, r * 3 % 5, -r], 1)


def group(rewards, rank, index, subset=0, prompt_id=None, pairs=()) -> EncodedGroup:
    responses = [[ZERO + int(2 * r)] for r in rewards]
    prompt = prompt_id if prompt_id is not None else index
    flat = [x for a, b, tie in pairs for x in (a, b, int(tie))]
    return EncodedGroup(
        [5, 6], responses, list(rank), subset, margin=0.0, index=index, scores=[], pairs=flat, prompt_id=prompt
    )


def hand_groups() -> list[EncodedGroup]:
    """K = 3 with a tie, K = 4 ranked, explicit pairs (a merged group) and a pair sharing G1's prompt."""
    return [
        group([3, 1, 2], [0, 1, 1], 0, subset=0, prompt_id=10),
        group([4, 1, 3, 2], [0, 1, 2, 3], 1, subset=0, prompt_id=11),
        group([1, 2, 5], [0, 1, 0], 2, subset=1, prompt_id=12, pairs=[(0, 1, False), (2, 1, False), (0, 2, True)]),
        group([0.5, 1.5], [0, 1], 3, subset=1, prompt_id=11),
    ]


def gathered_of(groups, batches, model: torch.nn.Module | None = None) -> dict:
    loader = DataLoader(groups, batch_sampler=batches, collate_fn=PaddedCollator(0))
    return gather_rewards(model or TokenReward(), loader, Accelerator(cpu=True))


# Each strict pair (better - worse reward) by hand: G0 0>1, 0>2; G1 the six of a ranking; G2 0>1, 2>1; G3 0>1.
DIFFS = {0: [2, 1], 1: [3, 1, 2, -2, -1, 1], 2: [-1, 3], 3: [-1]}
TAUS = {0: 2 / math.sqrt(6), 1: 1 / 3, 2: 0.0, 3: -1.0}  # tau-b: (C - D) / sqrt((n0 - n1)(n0 - n2))


def test_gather_keeps_one_copy_of_each_group_with_its_responses_and_comparisons():
    # G2 scored twice (a repeat, as a process short of a batch scores one again), batches out of split order.
    g = gathered_of(hand_groups(), [[3, 0], [1, 2], [2]])
    assert g["index"].tolist() == [0, 1, 2, 3] and g["prompt"].tolist() == [10, 11, 12, 11]
    assert g["reward"].tolist() == [3, 1, 2, 4, 1, 3, 2, 1, 2, 5, 0.5, 1.5]
    assert g["group"].tolist() == [0] * 3 + [1] * 4 + [2] * 3 + [3] * 2 and g["slot"].tolist()[:3] == [0, 1, 2]
    assert g["rank"].tolist() == [0, 1, 1, 0, 1, 2, 3, 0, 1, 0, 0, 1]
    comparisons = list(zip(*(g[k].tolist() for k in ("pair_group", "a", "b", "tie")), strict=True))
    assert [c for c in comparisons if c[0] == 2] == [(2, 0, 1, False), (2, 2, 1, False), (2, 0, 2, True)]
    assert sum(c[3] for c in comparisons) == 2 and len(comparisons) == 13
    diffs = (g["chosen"] - g["rejected"]).tolist()
    assert diffs == [d for k in range(4) for d in DIFFS[k]]


def test_the_gather_keeps_the_first_process_copy_with_its_own_responses_and_comparisons():
    """Gathered columns of two processes, as `gather_rewards` pads and concatenates them: process 1 scored group 1
    again (a filler), with other rewards; process 0's copy is kept, and the filler's responses and pairs go."""
    from rm.evaluation.gather import COPY, LINKED, arranged, keep_once

    c = COPY  # process 1's first copy tag
    parts = {  # groups: index, subset, prompt, copy; responses: copy, slot, rank; pairs: copy, a, b, tie
        "groups": torch.tensor([[0, 0, 7, 0], [1, 0, 8, 1], [2, 1, 9, c], [1, 0, 8, c + 1], [-1, -1, -1, -1]]),
        "responses": torch.tensor(
            [[0, 0, 0], [0, 1, 1], [1, 0, 0], [1, 1, 1], [c, 0, 0], [c, 1, 0], [c + 1, 1, 1], [c + 1, 0, 0], [-1] * 3]
        ),
        "reward": torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, -4.0, -3.0, -1.0]),
        "pairs": torch.tensor([[0, 0, 1, 0], [1, 0, 1, 0], [c, 0, 1, 1], [c + 1, 0, 1, 0], [-1, -1, -1, -1]]),
    }
    # A model with attribute outputs: each response's outputs and scores travel with its reward.
    parts["attribute_outputs"] = torch.stack([parts["reward"] * 10, parts["reward"] * 100], 1)
    parts["attribute_scores"] = torch.stack([-parts["reward"], torch.full_like(parts["reward"], float("nan"))], 1)
    # Soft labels travel with their comparisons (loss.strength=soft): the filler's 0.1 goes with it.
    parts["pair_target"] = torch.tensor([0.7, 0.8, float("nan"), 0.1, -1.0])
    g = arranged(keep_once(parts, LINKED))
    assert g["index"].tolist() == [0, 1, 2] and g["prompt"].tolist() == [7, 8, 9]
    assert g["reward"].tolist() == [1, 2, 3, 4, 5, 6] and g["slot"].tolist() == [0, 1] * 3
    assert g["attribute_outputs"].tolist() == [[10 * r, 100 * r] for r in range(1, 7)]
    assert (
        g["attribute_scores"][:, 0].tolist() == [-1, -2, -3, -4, -5, -6] and g["attribute_scores"][:, 1].isnan().all()
    )
    assert g["pair_group"].tolist() == [0, 1, 2] and g["tie"].tolist() == [False, False, True]
    assert (g["chosen"].tolist(), g["rejected"].tolist()) == ([1, 3], [2, 4])
    assert g["target"].tolist() == pytest.approx([0.7, 0.8])
    del parts["pair_target"]
    assert "target" not in arranged(keep_once(parts, LINKED))  # no soft labels: the columns of today


def test_group_metrics_by_hand_through_evaluate():
    result = evaluate(TokenReward(), DataLoader(hand_groups(), batch_sampler=[[0, 1], [2, 3]],
                      collate_fn=PaddedCollator(0)), Accelerator(cpu=True), ["a", "b"])  # fmt: skip
    o, a, b = result["overall"], result["subsets"]["a"], result["subsets"]["b"]
    diffs = [d for k in range(4) for d in DIFFS[k]]
    assert o["accuracy"] == pytest.approx(7 / 11) and o["n"] == 11
    assert o["mean_margin"] == pytest.approx(8 / 11)
    assert o["loss"] == pytest.approx(np.mean([math.log1p(math.exp(-d)) for d in diffs]))
    assert o["mean_chosen_reward"] == pytest.approx(29.5 / 11) and o["mean_rejected_reward"] == pytest.approx(21.5 / 11)
    # top-1: G0 (3 is best), G1 (4), G2 (5 goes to a best-ranked response) right, G3 wrong.
    assert o["top1_accuracy"] == pytest.approx(0.75)
    # best-of-K: G0, G1 yes; G2 no (best-ranked reward 1 is under the worse one's 2); G3 no.
    assert o["best_of_k_accuracy"] == pytest.approx(0.5)
    assert o["kendall_tau"] == pytest.approx(np.mean(list(TAUS.values())))
    assert (o["tied_pairs"], o["groups"], o["prompts"]) == (2, 4, 3)  # G1 and G3 share prompt 11
    assert o["tie_mean_abs_diff"] == pytest.approx((1 + 4) / 2)  # G0 |1 - 2|, G2 |1 - 5|
    assert o["strict_mean_abs_diff"] == pytest.approx(sum(abs(d) for d in diffs) / 11)
    assert a["accuracy"] == pytest.approx(6 / 8) and b["accuracy"] == pytest.approx(1 / 3)
    assert (a["top1_accuracy"], b["top1_accuracy"]) == (1.0, 0.5)
    assert (a["best_of_k_accuracy"], b["best_of_k_accuracy"]) == (1.0, 0.0)
    assert b["kendall_tau"] == pytest.approx(-0.5) and a["kendall_tau"] == pytest.approx((TAUS[0] + TAUS[1]) / 2)
    assert (a["tie_mean_abs_diff"], b["tie_mean_abs_diff"]) == (1.0, 4.0)
    assert (a["prompts"], b["prompts"]) == (2, 2) and has_groups(o)


def random_pairs(n: int, seed: int, prompts: int | None = None) -> list[EncodedGroup]:
    """n pairs in two subsets with rewards in halves (some equal: a reward tie counts half), each its own prompt
    or `prompts` prompts in turn."""
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 12, size=(n, 2)) / 2
    rewards[:3, 1] = rewards[:3, 0]
    return [group(r, [0, 1], i, subset=i % 2, prompt_id=i if prompts is None else i % prompts)
            for i, r in enumerate(rewards)]  # fmt: skip


def same(x, y) -> bool:
    return (isinstance(x, float) and math.isnan(x) and math.isnan(y)) or x == y


def test_a_pairwise_eval_set_gives_todays_numbers_exactly():
    pairs = random_pairs(60, seed=1)
    g = gathered_of(pairs, [list(range(k, min(k + 7, 60))) for k in range(0, 60, 7)])
    now = summarize_groups(g, ["a", "b"])
    # Today's path: the pairwise summary of the (chosen, rejected) rewards, computed here from the groups.
    c = torch.tensor([(p.response_ids[0][0] - ZERO) / 2 for p in pairs])
    r = torch.tensor([(p.response_ids[1][0] - ZERO) / 2 for p in pairs])
    before = summarize_by_subset({"chosen": c, "rejected": r, "subset_ids": torch.tensor([i % 2 for i in range(60)])},
                                 ["a", "b"])  # fmt: skip
    for name in ("overall", "a", "b"):
        want = before["overall"] if name == "overall" else before["subsets"][name]
        got = now["overall"] if name == "overall" else now["subsets"][name]
        assert all(same(got[k], v) for k, v in want.items()), name
        # The interval resamples prompts, here one pair each: today's pairwise bootstrap, draw for draw.
        mask = np.ones(60, bool) if name == "overall" else np.arange(60) % 2 == (name == "b")
        assert got["accuracy_ci95"] == list(metrics.bootstrap_ci(metrics.correct(c.numpy()[mask], r.numpy()[mask])))
        assert got["groups"] == got["prompts"] == got["n"] and got["tied_pairs"] == 0
    assert not has_groups(now["overall"])


def test_pairs_of_one_prompt_resample_together():
    """15 prompts with 4 pairs each, each prompt's pairs all right or all wrong: the interval resamples prompts (the
    ratio bootstrap over their sums), wider than one over 60 independent pairs, which the same pairs give when
    each has a prompt of its own."""
    rewards = [[1, 0] if (i // 4) % 3 else [0, 1] for i in range(60)]
    shared = [group(r, [0, 1], i, prompt_id=i // 4) for i, r in enumerate(rewards)]
    alone = [group(r, [0, 1], i) for i, r in enumerate(rewards)]
    batches = [list(range(k, k + 10)) for k in range(0, 60, 10)]
    by_prompt = summarize_groups(gathered_of(shared, batches), ["a"])["overall"]
    by_pair = summarize_groups(gathered_of(alone, batches), ["a"])["overall"]
    right = np.array([1.0 if (i // 4) % 3 else 0.0 for i in range(60)])
    assert by_prompt["accuracy"] == by_pair["accuracy"] == pytest.approx(right.mean())
    assert by_prompt["prompts"] == 15 and by_pair["prompts"] == 60
    assert by_pair["accuracy_ci95"] == list(metrics.bootstrap_ci(right))
    sums = right.reshape(15, 4).sum(1)
    assert by_prompt["accuracy_ci95"] == list(ratio_bootstrap_ci(sums, np.full(15, 4.0)))
    width = np.diff(by_prompt["accuracy_ci95"])[0]
    assert width > 1.5 * np.diff(by_pair["accuracy_ci95"])[0]


# `rm eval`'s numbers (build_result) from text items: pairs, K-response groups and a merged group.


def text_pairs(n: int, seed: int, repeat: int = 1) -> tuple[list[Pair], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    pairs = [Pair(f"prompt {i // repeat}", "c" * int(rng.integers(1, 30)), "r" * int(rng.integers(1, 30)),
                  "ab"[i % 2], origin=f"f:{i}") for i in range(n)]  # fmt: skip
    rewards = [rng.normal(size=2) for _ in range(n)]
    rewards[0][1] = rewards[0][0]
    return pairs, rewards


def test_rm_eval_on_pairs_with_distinct_prompts_is_the_pairwise_report():
    pairs, rewards = text_pairs(80, seed=2)
    got = build_result(pairs, rewards, samples=300, seed=4)
    c, r = np.array([x[0] for x in rewards]), np.array([x[1] for x in rewards])
    lc, lr = (np.array([len(getattr(p, k)) for p in pairs], dtype=float) for k in ("chosen", "rejected"))
    ids = np.array([i % 2 for i in range(80)])
    want = by_subset(lambda m: metrics.pair_summary(c[m], r[m], lc[m], lr[m], samples=300, seed=4), ids, ["a", "b"])
    for name in ("overall", "a", "b"):
        w = want["overall"] if name == "overall" else want["subsets"][name]
        g = got["overall"] if name == "overall" else got["subsets"][name]
        assert all(same(g[k], v) for k, v in w.items()), name
    assert got["calibration"]["bins"] == metrics.calibration_bins(c, r)
    assert got["length_bins"]["overall"] == metrics.length_diff_bins(c, r, lc, lr)


def test_rm_eval_resamples_prompts_that_repeat():
    pairs, rewards = text_pairs(80, seed=3, repeat=4)
    got = build_result(pairs, rewards, samples=300, seed=4)["overall"]
    c, r = np.array([x[0] for x in rewards]), np.array([x[1] for x in rewards])
    right = metrics.correct(c, r)
    assert got["prompts"] == 20 and got["groups"] == 80
    assert got["accuracy_ci95"] == list(ratio_bootstrap_ci(right.reshape(20, 4).sum(1), np.full(20, 4.0), 300, seed=4))
    assert got["accuracy_ci95"] != list(metrics.bootstrap_ci(right, 300, seed=4))


def text_groups() -> tuple[list, list[np.ndarray]]:
    """The hand groups as text: the K = 3 group loses its last response to max_length (NaN), the tie with it."""
    items = [
        Group("p0", ("a", "bb", "ccc"), (0, 1, 1), "a", origin="f:0"),
        Group("p1", ("a", "bb", "ccc", "dddd"), (0, 1, 2, 3), "a", origin="f:1"),
        Group(
            "p2", ("a", "bb", "ccc"), (0, 1, 0), "b", origin="f:2", pairs=((0, 1, False), (2, 1, False), (0, 2, True))
        ),  # fmt: skip
        Pair("p1", "xx", "y", "b", origin="f:3"),
    ]
    return items, [np.array([3, 1, np.nan]), np.array([4.0, 1, 3, 2]), np.array([1.0, 2, 5]), np.array([0.5, 1.5])]


def test_rm_eval_group_metrics_by_hand_and_a_dropped_response():
    items, rewards = text_groups()
    result = build_result(items, rewards, samples=200, seed=0)
    o = result["overall"]
    # G0 keeps 0 > 1 only (response 2 unscored): 10 strict pairs, 6 right; one tie left (G2's).
    assert o["n"] == 10 and o["accuracy"] == pytest.approx(6 / 10) and o["tied_pairs"] == 1
    assert o["tie_mean_abs_diff"] == pytest.approx(4.0)
    assert o["top1_accuracy"] == pytest.approx(0.75) and o["best_of_k_accuracy"] == pytest.approx(0.5)
    assert o["kendall_tau"] == pytest.approx(np.mean([1.0, TAUS[1], TAUS[2], TAUS[3]]))
    assert o["prompts"] == 3 and o["groups"] == 4
    # The length bias is over strict pairs, the better response's length as the chosen one's.
    assert o["longer_chosen_rate"] == pytest.approx(np.mean([0, 0, 0, 0, 0, 0, 0, 0, 1, 1]))
    assert has_groups(o)


def test_rm_eval_report_shows_group_metrics_only_for_group_data(tmp_path):
    from rm.evaluation.eval_report import GROUP_PLOT, PLOTS, write_report

    for name, (items, rewards) in {"groups": text_groups(), "pairs": text_pairs(30, seed=5)}.items():
        result = build_result(items, rewards, samples=50, seed=0)
        result["eval"] = {
            "model": "m", "data": "d", "pairs_loaded": len(items), "records_skipped": {}, "pairs_dropped_too_long": 0,
            "prompts_truncated": 0, "max_length": 64, "length_unit": "characters",
            "bootstrap": {"method": "percentile", "samples": 50, "seed": 0},
        }  # fmt: skip
        write_report(tmp_path / name, result, items, rewards, seed=0)
        md = (tmp_path / name / "report.md").read_text()
        rows = [json.loads(line) for line in (tmp_path / name / "rewards.jsonl").read_text().splitlines()]
        assert all((tmp_path / name / p).is_file() for p in PLOTS)
        if name == "groups":
            assert "## Groups" in md and f"]({GROUP_PLOT})" in md and (tmp_path / name / GROUP_PLOT).is_file()
            assert "best-of-K" in format_table(result)
            assert rows[0]["rewards"] == [3, 1, None] and rows[0]["rank"] == [0, 1, 1]
            assert rows[3]["chosen_reward"] == 0.5  # a pair keeps today's line
        else:
            assert "## Groups" not in md and not (tmp_path / name / GROUP_PLOT).exists()
            assert "best-of-K" not in format_table(result) and "- pairs: 30 scored" in render_markdown(result)
            assert set(rows[0]) == {"origin", "subset", "chosen_reward", "rejected_reward", "chosen_chars",
                                    "rejected_chars"}  # fmt: skip


def test_rm_eval_of_rewardbench2_groups_against_plain_transformers(exported_tiny, tmp_path):
    """`rm eval` end to end on RewardBench 2's fields (K = 4, the chosen tied among themselves, the rejected too):
    each response's reward from plain transformers, and the group metrics made from those by `group_summary`."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rm.config import DataConfig
    from rm.data.load import load_pairs
    from rm.evaluation.eval_report import GROUP_PLOT, EvalOptions, evaluate_model
    from rm.evaluation.ranking_metrics import group_summary

    source = Path(__file__).parent.parent / "fixtures" / "rewardbench2.jsonl"
    result = evaluate_model(str(exported_tiny), DataConfig(source=str(source)), tmp_path, EvalOptions(samples=100))
    items = load_pairs(str(source), "test", [])
    tok = AutoTokenizer.from_pretrained(exported_tiny)
    hf = AutoModelForSequenceClassification.from_pretrained(exported_tiny).eval()
    with torch.no_grad():
        ref = [np.array([hf(**tok(g.prompt + t, return_tensors="pt")).logits[0, 0].item() for t in g.responses])
               for g in items]  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "rewards.jsonl").read_text().splitlines()]
    assert [r["origin"] for r in rows] == [g.origin for g in items]
    for row, want, g in zip(rows, ref, items, strict=True):
        assert np.allclose(row["rewards"], want, atol=1e-5) and row["rank"] == list(g.rank)
    want = group_summary(ref, [np.array(g.rank) for g in items], samples=100)
    o = result["overall"]
    for key in ("accuracy", "n", "top1_accuracy", "best_of_k_accuracy", "kendall_tau", "tied_pairs", "prompts"):
        assert same(o[key], want[key]) or o[key] == pytest.approx(want[key], abs=1e-5), key
    assert o["tied_pairs"] > 0 and o["n"] == 3 + 4  # 1 x 3 and 2 x 2 strict pairs
    for m in result["subsets"].values():
        assert {"top1_accuracy", "best_of_k_accuracy", "kendall_tau", "tie_mean_abs_diff"} <= set(m)
    assert "## Groups" in (tmp_path / "report.md").read_text() and (tmp_path / GROUP_PLOT).is_file()
    assert result["eval"]["plots"][-1] == GROUP_PLOT


def test_rm_eval_leaves_out_a_response_too_long_and_keeps_the_rest_in_place(exported_tiny, tmp_path):
    """A response that cannot fit max_length leaves its group (encoding's rule): its reward is null in
    rewards.jsonl, the others keep their places and their rewards, and only their comparisons count."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rm.config import DataConfig
    from rm.data.load import load_pairs
    from rm.evaluation.eval_report import EvalOptions, evaluate_model

    long = " ".join(["a very long answer"] * 40)
    record = {"prompt": "Name a colour.", "responses": [{"text": "Red.", "score": 3}, {"text": long, "score": 2},
              {"text": "Blue is one.", "score": 1}, {"text": "Seven.", "score": 0}]}  # fmt: skip
    source = tmp_path / "groups.jsonl"
    source.write_text(json.dumps(record) + "\n")
    result = evaluate_model(str(exported_tiny), DataConfig(source=str(source)), tmp_path / "out",
                            EvalOptions(samples=20, max_length=48))  # fmt: skip
    row = json.loads((tmp_path / "out" / "rewards.jsonl").read_text())
    tok = AutoTokenizer.from_pretrained(exported_tiny)
    hf = AutoModelForSequenceClassification.from_pretrained(exported_tiny).eval()
    (item,) = load_pairs(str(source), "test", [])  # the prompt and responses as rendered for the model
    with torch.no_grad():
        ref = [hf(**tok(item.prompt + item.responses[k], return_tensors="pt")).logits[0, 0].item() for k in (0, 2, 3)]
    assert row["rewards"][1] is None and np.allclose([row["rewards"][k] for k in (0, 2, 3)], ref, atol=1e-5)
    assert result["eval"]["responses_dropped_too_long"] == 1 and result["overall"]["n"] == 3
    right = sum(ref[a] > ref[b] for a, b in ((0, 1), (0, 2), (1, 2)))
    assert result["overall"]["accuracy"] == pytest.approx(right / 3)


# 2 and 3 processes: the same groups, dealt as training's eval deals them, gathered exactly as by one process.

MIXED = 31
SUBSETS = ["x", "y", "z"]
"""Groups of mixed K (2 to 5), with ties and explicit pairs: batches of 3 make 11, dealt unevenly to 2 or 3."""


def mixed_groups() -> list[EncodedGroup]:
    rng = np.random.default_rng(11)
    out = []
    for i in range(MIXED):
        k = int(rng.integers(2, 6))
        rank = rng.integers(0, k, size=k)
        rank[0], rank[-1] = 0, k  # never all tied
        pairs = [(0, k - 1, False), (1, k - 1, True)] if i % 5 == 0 and k > 2 else ()
        out.append(group(rng.integers(0, 20, size=k) / 2, rank, i, subset=i % 3, prompt_id=i // 2, pairs=pairs))
        scores = np.random.default_rng(100 + i).integers(0, 5, size=2 * k).astype(float)  # [k x 2 attributes]
        scores[::7] = np.nan  # some missing
        out[-1].attributes = scores.tolist()
        if k == 2 and i % 3:  # soft labels on some pairs (loss.strength=soft), hard ones on the rest
            out[-1].target = float(np.random.default_rng(200 + i).integers(0, 11)) / 10
    return out


def worker(out: str) -> None:
    """The `eval_groups` scenario of the shared launches (tests/launched/scenarios.py), in each process."""
    accelerator = Accelerator()
    groups = mixed_groups()
    plan = PairBatches(groups, "padded", 3, shuffle=False)
    batches = EvalBatches(plan, accelerator.process_index, accelerator.num_processes)
    loader = DataLoader(groups, batch_sampler=batches, collate_fn=PaddedCollator(0))
    gathered = gather_rewards(TokenAttributes(), loader, accelerator)
    result = summarize_groups(gathered, ["x", "y", "z"]) | {"attributes": gathered_block(gathered, ["u", "v"], SUBSETS)}
    result["soft_calibration"] = gathered_calibration(gathered)
    if accelerator.is_main_process:
        saved = {k: v.tolist() for k, v in gathered.items()} | {"processes": accelerator.num_processes}
        Path(out).write_text(json.dumps(saved | {"result": metrics.json_safe(result)}))
    accelerator.wait_for_everyone()
    accelerator.end_training()


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_groups_are_gathered_exactly_under_several_processes(launched, processes):
    groups = mixed_groups()
    one = gathered_of(
        groups, list(EvalBatches(PairBatches(groups, "padded", 3, shuffle=False), 0, 1)), TokenAttributes()
    )
    many = json.loads((launched(processes).out("eval_groups") / "gathered.json").read_text())  # `worker` above
    assert many["processes"] == processes
    for key, value in one.items():  # attribute scores hold NaN (missing): compared as arrays
        np.testing.assert_array_equal(np.array(many[key], dtype=float), value.double().numpy(), err_msg=key)
    expected = summarize_groups(one, ["x", "y", "z"]) | {"attributes": gathered_block(one, ["u", "v"], SUBSETS)}
    expected["soft_calibration"] = gathered_calibration(one)
    assert many["result"] == metrics.json_safe(expected)
    assert many["result"]["attributes"]["v"]["overall"]["missing"] > 0
    assert many["result"]["soft_calibration"]["n"] == int(np.isfinite(many["target"]).sum()) > 0
