"""Step scores from one forward equal each prefix scored alone, in both scoring layouts, and steps that do not fit
max_length are cut whole and scored None."""

import math

import pytest
import torch

from conftest import tiny_model
from rm.collate.scoring import PackedScoring, PaddedLayout
from rm.errors import ModelError
from rm.evaluation.steps.step_scoring import StepProblem, probability, score_steps
from rm.model.reward import PooledLogits, RewardModel
from rm.tokens.steps.step_tokens import encode_steps
from rm.tokens.tokenizer import special_prefix

PROBLEMS = [
    StepProblem("What is 3 + 4?", (("3 + 4 = 7", "so 7"), ("3 + 4 = 8", "because four", "so 8"), ("7",))),
    StepProblem("Name a prime.", (("2 is prime", "done"),)),
    StepProblem("What is 2 * 5?", (("2 * 5 = 10",), ("2 * 5 = 25", "so 25"))),
]


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    hf = tiny_model(tokenizer)
    with torch.no_grad():
        hf.score.weight.normal_(0, 1.0)  # outputs far from 0, so a wrong position shows
    return RewardModel(hf).eval()


def prefix_probabilities(model, tokenizer, problem: StepProblem, separator: str) -> list[list[float]]:
    """Each step's probability from a forward of the prompt and the solution up to that step alone."""
    e = encode_steps(tokenizer, problem.prompt, problem.solutions, separator, 0, special_prefix(tokenizer)).group
    out = []
    for ids, ends in zip(e.response_ids, e.step_ends, strict=True):
        row = []
        for end in ends:
            text = torch.tensor([[*e.prompt_ids, *ids[: end + 1].tolist()]])
            with torch.no_grad():
                row.append(probability(model(input_ids=text, attention_mask=torch.ones_like(text)).item()))
        out.append(row)
    return out


@pytest.mark.parametrize("layout", [PaddedLayout, PackedScoring])
@pytest.mark.parametrize("separator", ["\n\n", " ки\n"])
def test_one_forward_equals_each_prefix_alone(model, tokenizer, layout, separator):
    got = score_steps(
        model, tokenizer, layout(tokenizer.pad_token_id), PROBLEMS, max_length=0, separator=separator, batch_size=3
    )
    for problem, scores in zip(PROBLEMS, got, strict=True):
        expected = prefix_probabilities(model, tokenizer, problem, separator)
        assert [len(s) for s in scores] == [len(s) for s in problem.solutions]
        for row, want in zip(scores, expected, strict=True):
            assert row == pytest.approx(want, abs=1e-5)
    spread = [p for scores in got for row in scores for p in row]
    assert max(spread) - min(spread) > 0.05  # the head reads different positions, not one repeated value


def test_steps_that_do_not_fit_are_cut_whole_and_scored_none(model, tokenizer):
    problem = PROBLEMS[0]
    e = encode_steps(tokenizer, problem.prompt, problem.solutions, "\n\n", 0, special_prefix(tokenizer)).group
    limit = len(e.prompt_ids) + e.step_ends[1][1] + 1  # room for two steps of the second solution, not three
    cut = encode_steps(tokenizer, problem.prompt, problem.solutions, "\n\n", limit, special_prefix(tokenizer))
    assert cut.group.step_ends[1] == e.step_ends[1][:2] and cut.steps_cut == [0, 1, 0]
    assert len(cut.group.response_ids[1]) == e.step_ends[1][1] + 1
    [scores] = score_steps(model, tokenizer, PaddedLayout(tokenizer.pad_token_id), [problem], max_length=limit)
    full = prefix_probabilities(model, tokenizer, problem, "\n\n")
    assert scores[1][2] is None and scores[1][:2] == pytest.approx(full[1][:2], abs=1e-5)
    assert scores[0] == pytest.approx(full[0], abs=1e-5)


def test_a_prompt_with_no_room_scores_no_step(model, tokenizer):
    [scores] = score_steps(model, tokenizer, PaddedLayout(tokenizer.pad_token_id), PROBLEMS[:1], max_length=3)
    assert scores == [[None, None], [None, None, None], [None]]


def test_the_probability_is_a_stable_sigmoid():
    assert probability(0.0) == 0.5 and probability(800.0) == 1.0 and probability(-800.0) == 0.0
    assert probability(math.log(3)) == pytest.approx(0.75) and probability(math.nan) is None


def test_a_pooling_model_is_refused_in_one_line(tokenizer):
    pooled = PooledLogits(tiny_model(tokenizer))
    with pytest.raises(ModelError, match="step scores are read at each step's last token"):
        score_steps(pooled, tokenizer, PaddedLayout(tokenizer.pad_token_id), PROBLEMS[:1], max_length=0)
