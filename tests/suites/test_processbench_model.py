"""ProcessBench scored with a tiny model: every step's probability equal to plain transformers on the prefix that
ends at it, the block equal to the paper's rule applied to those by hand, a controlled model giving hand-computed
numbers through the whole plumbing, the same scores whatever the batch size and the number of processes, and
steps past max_length leaving their item out, counted."""

import json
import math
import threading
from pathlib import Path

import pytest
import torch

from conftest import tiny_model
from rm.evaluation.eval_report import EvalOptions
from rm.evaluation.score_file import default_layout
from rm.model.reward import RewardModel
from rm.suites.score_items import score_step_problems
from rm.suites.steps import bench_eval
from rm.suites.steps.bench_eval import BenchSuite
from rm.suites.steps.bench_records import load_bench
from rm.suites.suite_eval import SuiteData, evaluate_suite
from rm.tokens.tokenizer import special_prefix

BENCH = Path(__file__).resolve().parent / "fixtures" / "processbench"
SEPARATOR = " ки\n"


@pytest.fixture(scope="module")
def prm(tokenizer):
    """A tiny random Llama with a step separator of its own in its config, as an rm PRM export records it, and its
    head turned so that step probabilities spread on both sides of 0.5: a random model's hidden state at the
    separator is mostly the separator's own, so the head is made orthogonal to the mean hidden state at the
    fixture's step ends and scaled to a logit spread of about 2."""
    hf = tiny_model(tokenizer, seed=3)
    hf.config.rm_step_separator = SEPARATOR
    with torch.no_grad():
        ends = torch.stack([hf.model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
                            for i in items() for ids in prefix_ids(tokenizer, i.problem, i.steps)])  # fmt: skip
        w = hf.score.weight[0] - ends.mean(0)
        w -= (w @ ends.mean(0)) / (ends.mean(0) @ ends.mean(0)) * ends.mean(0)
        hf.score.weight[0] = w * 2.0 / (ends @ w).std()
    return RewardModel(hf).eval()


def items():
    from rm.data.data_report import DataReport

    return load_bench(str(BENCH), "", None, DataReport("error"))


def run(prm, tokenizer, out: Path, **options) -> dict:
    """`rm eval --suite processbench`'s whole job on the fixture with the model given in memory."""
    options = {"max_length": 512, **options}
    return evaluate_suite("tiny-prm", "processbench", SuiteData(source=str(BENCH)), out, EvalOptions(**options),
                          (prm, tokenizer))  # fmt: skip


def prefix_ids(tokenizer, problem: str, steps: tuple[str, ...]) -> list[list[int]]:
    """The ids of the problem and the steps up to each one, each piece tokenized alone with the separator after
    it, the tokenizer's special prefix in front."""

    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompt, solution, out = special_prefix(tokenizer) + ids(problem + SEPARATOR), [], []
    for step in steps:
        solution = solution + ids(step + SEPARATOR)
        out.append(prompt + solution)
    return out


def prefix_probabilities(prm, tokenizer, problem: str, steps: tuple[str, ...]) -> list[float]:
    """Plain transformers on each prefix alone, no padding: sigmoid of the logit its own sequence-classification
    head pools."""
    with torch.no_grad():
        logits = [prm.hf(input_ids=torch.tensor([ids])).logits[0, 0].item()
                  for ids in prefix_ids(tokenizer, problem, steps)]  # fmt: skip
    return [1 / (1 + math.exp(-x)) for x in logits]


def papers_numbers(rows: list[tuple[str, int, list[float]]]) -> dict:
    """The paper's metric written out again from its definition: per split the accuracy on erroneous and on correct
    items of the first step below 0.5, their harmonic mean, the mean over splits."""
    splits: dict[str, list[list[bool]]] = {}
    for split, label, probs in rows:
        predicted = next((k for k, p in enumerate(probs) if p < 0.5), -1)
        splits.setdefault(split, [[], []])[label == -1].append(predicted == label)
    f1 = {}
    for split, (erroneous, correct) in splits.items():
        a, b = sum(erroneous) / len(erroneous), sum(correct) / len(correct)
        f1[split] = 0.0 if a + b == 0 else 2 * a * b / (a + b)
    return {"sections": f1, "score": sum(f1.values()) / len(f1)}


@pytest.mark.slow
def test_every_step_is_its_prefix_alone_and_the_numbers_are_the_papers(prm, tokenizer, tmp_path):
    result = run(prm, tokenizer, tmp_path, batch_size=3)
    rows = [json.loads(line) for line in (tmp_path / "step_scores.jsonl").read_text().splitlines()]
    loaded = items()
    assert [r["id"] for r in rows] == [i.id for i in loaded] and len(rows) == 14
    reference = [prefix_probabilities(prm, tokenizer, i.problem, i.steps) for i in loaded]
    for row, want in zip(rows, reference, strict=True):
        assert row["step_probs"] == pytest.approx(want, abs=1e-5)
    flat = [p for probs in reference for p in probs]
    assert min(abs(p - 0.5) for p in flat) > 1e-3  # no prediction hangs on the last digits
    predicted = [r["prediction"] for r in rows]
    assert -1 in predicted and any(p > 0 for p in predicted)  # some solutions pass, some are flagged late
    want = papers_numbers([(i.split, i.label, p) for i, p in zip(loaded, reference, strict=True)])
    suite = result["suite"]
    assert suite["score"] == pytest.approx(want["score"], abs=1e-12)
    assert suite["sections"] == pytest.approx(want["sections"], abs=1e-12)
    assert (
        result["eval"]["step_separator"] == SEPARATOR and result["eval"]["step_separator_from"] == "the model's config"
    )
    assert json.loads((tmp_path / "eval.json").read_text())["suite"]["score"] == pytest.approx(suite["score"])
    assert "ProcessBench F1" in (tmp_path / "report.md").read_text()


CHOSEN = {"gsm8k-0": -1, "gsm8k-1": 0, "gsm8k-2": 1, "gsm8k-3": 0, "math-0": -1, "math-1": 1, "math-2": -1,
          "math-3": -1, "olympiadbench-0": -1, "olympiadbench-1": 0, "olympiadbench-2": -1, "omnimath-0": 2,
          "omnimath-1": 1, "omnimath-2": 0}  # fmt: skip
"""The step a controlled model flags first in each fixture item (-1: none)."""


def test_a_controlled_model_gives_the_hand_computed_numbers(prm, tokenizer, tmp_path, monkeypatch):
    """The fixture's labels against CHOSEN:
    gsm8k  labels -1 0 2 -1, flagged -1 0 1 0: erroneous 1/2, correct 1/2, F1 1/2;
    math   labels -1 1 -1 1, flagged -1 1 -1 -1: erroneous 1/2, correct 2/2, F1 2/3;
    olympiadbench labels -1 0 -1, flagged -1 0 -1: 1, 1, F1 1;
    omnimath labels -1 1 1, flagged 2 1 0: erroneous 1/2, correct 0/1, F1 0.
    score = (1/2 + 2/3 + 1 + 0) / 4 = 13/24. Detection (flagging at all): tp 2 + 1 + 1 + 2 = 6, fp 1 (gsm8k-3) + 1
    (omnimath-0) = 2, fn 1 (math-3): P 6/8, R 6/7, F1 = 2 * 0.75 * (6/7) / (0.75 + 6/7) = 0.8."""
    by_text = {(i.problem, i.steps): CHOSEN[i.id] for i in items()}

    def controlled(model, encoded, layout, batch_size, accelerator):
        """Logit +2 (p 0.88) before the chosen step, -2 (p 0.12) from it on, read back from each step's ids."""
        out = []
        for e in encoded:
            problem = tokenizer.decode(e.group.prompt_ids[len(special_prefix(tokenizer)) :]).removesuffix(SEPARATOR)
            per_solution = []
            for ids, ends in zip(e.group.response_ids, e.group.step_ends, strict=True):
                starts = [0] + [end + 1 for end in ends[:-1]]
                pieces = [ids[a : b + 1] for a, b in zip(starts, ends, strict=True)]
                steps = tuple(tokenizer.decode(piece).removesuffix(SEPARATOR) for piece in pieces)
                flagged = by_text[(problem, steps)]
                per_solution.append([-2.0 if flagged != -1 and k >= flagged else 2.0 for k in range(len(steps))])
            out.append(per_solution)
        return out

    monkeypatch.setattr(bench_eval, "score_step_problems", controlled)
    suite = run(prm, tokenizer, tmp_path, batch_size=2)["suite"]
    assert suite["score"] == pytest.approx(13 / 24, abs=1e-12)
    assert suite["sections"] == pytest.approx({"gsm8k": 0.5, "math": 2 / 3, "olympiadbench": 1.0, "omnimath": 0.0})
    assert suite["splits"]["math"]["erroneous_acc"] == 0.5 and suite["splits"]["omnimath"]["correct_acc"] == 0.0
    detection = suite["error_detection"]
    assert (detection["detection_tp"], detection["detection_fp"], detection["detection_fn"]) == (6, 2, 1)
    assert detection["detection_f1"] == pytest.approx(0.8, abs=1e-12) and suite["notes"] == []
    rows = [json.loads(line) for line in (tmp_path / "step_scores.jsonl").read_text().splitlines()]
    assert {r["id"]: r["prediction"] for r in rows} == CHOSEN


class ThreadGroup:
    """W threads standing in for W processes: each exchange hands every thread the values of all, in rank order."""

    def __init__(self, world: int):
        self.world, self.barrier, self.slots = world, threading.Barrier(world), {}

    def exchange(self, rank: int, value):
        self.slots[rank] = value
        self.barrier.wait()
        out = [self.slots[r] for r in range(self.world)]
        self.barrier.wait()
        return out


class ThreadAccelerator:
    """What `score_step_problems` asks of accelerate, over a ThreadGroup: rank, world, device, a padded gather."""

    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.process_index, self.num_processes = group, rank, group.world
        self.device, self.is_main_process = torch.device("cpu"), rank == 0

    def pad_across_processes(self, tensor, pad_index):
        longest = max(self.group.exchange(self.process_index, len(tensor)))
        pad = torch.full((longest - len(tensor), *tensor.shape[1:]), pad_index, dtype=tensor.dtype)
        return torch.cat([tensor, pad])

    def gather(self, tensor):
        return torch.cat(self.group.exchange(self.process_index, tensor))


def scored_on(world: int, prm, bench: BenchSuite, layout, batch_size: int) -> list:
    """Every process's result of `score_step_problems` on `world` thread processes (all must agree)."""
    group, results = ThreadGroup(world), [None] * world

    def one(rank):
        results[rank] = score_step_problems(prm, bench.encoded, layout, batch_size, ThreadAccelerator(group, rank))

    threads = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(r == results[0] for r in results) and results[0] is not None
    return results[0]


@pytest.mark.slow
def test_the_scores_do_not_depend_on_the_batch_size_or_the_processes(prm, tokenizer):
    """One process at batch 3 is the reference; 2 and 3 processes (a filler batch on some) give it exactly, other
    batch sizes within float error. Each solution's outputs are its own: none empty, none NaN."""
    bench = BenchSuite(items(), tokenizer, 512, SEPARATOR)
    assert len(bench.encoded) < len(bench.items)  # problems with several solutions share their prompt
    layout = default_layout(prm, tokenizer.pad_token_id)
    one = scored_on(1, prm, bench, layout, 3)
    for world in (2, 3):
        assert scored_on(world, prm, bench, layout, 3) == one
    for size in (1, 64):
        other = scored_on(1, prm, bench, layout, size)
        for a, b in zip(one, other, strict=True):
            for x, y in zip(a, b, strict=True):
                assert x == pytest.approx(y, abs=1e-5)
    steps = [len(bench.items[k].steps) for k in range(len(bench.items))]
    assert [len(one[p][s]) for p, s in bench.where] == steps
    assert not any(math.isnan(v) for p in one for s in p for v in s)


@pytest.mark.slow
def test_steps_past_max_length_leave_their_item_out_counted(prm, tokenizer, tmp_path):
    """At a max_length that cuts the longer solutions, each cut item is left out of every number and counted per
    split; its scored steps keep the probabilities they have whole (a prefix does not see what follows it)."""
    whole = run(prm, tokenizer, tmp_path / "whole")
    lengths = sorted(len(e.group.prompt_ids) + max(len(r) for r in e.group.response_ids)
                     for e in BenchSuite(items(), tokenizer, 0, SEPARATOR).encoded)  # fmt: skip
    limit = lengths[len(lengths) // 2]
    cut = run(prm, tokenizer, tmp_path / "cut", max_length=limit)
    bench = BenchSuite(items(), tokenizer, limit, SEPARATOR)
    expected = {}
    for i, c in zip(bench.items, bench.cut, strict=True):
        expected[i.split] = expected.get(i.split, 0) + (c > 0)
    assert 0 < sum(expected.values()) < len(bench.items)
    assert {s: m["left_out_cut"] for s, m in cut["suite"]["splits"].items()} == expected
    assert cut["eval"]["items_cut"] == sum(expected.values()) == cut["suite"]["left_out_cut"]
    assert any("left out of every number" in n for n in cut["suite"]["notes"])
    rows = [json.loads(line) for line in (tmp_path / "cut" / "step_scores.jsonl").read_text().splitlines()]
    full = [json.loads(line) for line in (tmp_path / "whole" / "step_scores.jsonl").read_text().splitlines()]
    for row, ref in zip(rows, full, strict=True):
        kept = len(row["step_probs"]) - row["steps_cut"]
        assert row["step_probs"][kept:] == [None] * row["steps_cut"]
        assert row["step_probs"][:kept] == pytest.approx(ref["step_probs"][:kept], abs=1e-5)
        assert (row["prediction"] is None) == (row["steps_cut"] > 0)
    judged = [(s, m["n_erroneous"] + m["n_correct"]) for s, m in cut["suite"]["splits"].items()]
    assert judged == [(s, m["items"] - expected[s]) for s, m in whole["suite"]["splits"].items()]
