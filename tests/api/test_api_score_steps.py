"""`rm.load(...).score_steps`: a process reward model's P(step correct) per step in the input's shape, equal to
plain transformers' token classifier at the step ends (1e-5) and to `score_steps` in another layout and batching
(1e-6); Math-Shepherd and PRM800K records read as their steps; steps past max_length are None; a bad input is one
DataError naming it and its field."""

import pytest
from scoring.prm_exports import ONE, PROBLEM, SEPARATOR, flat, plain_step_probabilities, prm_export

import rm
from rm.collate.scoring import PaddedLayout
from rm.errors import ConfigError, DataError
from rm.evaluation.steps.step_scoring import StepProblem, score_steps


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory):
    return prm_export(tokenizer, tmp_path_factory.mktemp("api-steps") / "prm")


@pytest.fixture(scope="module")
def model(folder):
    return rm.load(folder, device="cpu")


def close(got, want, tol: float) -> None:
    assert [x is None for x in flat(got)] == [x is None for x in flat(want)]
    assert [x for x in flat(got) if x is not None] == pytest.approx([x for x in flat(want) if x is not None], abs=tol)


def test_a_problem_a_solution_and_a_list_come_back_in_their_shapes(model, folder, tokenizer):
    one = model.score_steps(PROBLEM)
    assert [len(s) for s in one] == [2, 3]
    close(one, plain_step_probabilities(folder, tokenizer, PROBLEM), 1e-5)
    alone = model.score_steps(ONE)  # `labels` are not read
    assert len(alone) == 2 and all(isinstance(p, float) for p in alone)
    close(alone, plain_step_probabilities(folder, tokenizer, ONE), 1e-5)
    both = model.score_steps([ONE, PROBLEM, ONE], batch_size=2)
    close(both, [alone, one, alone], 1e-6)
    assert model.score_steps([]) == []


def test_the_numbers_are_score_steps_in_another_layout_and_batching(model, tokenizer):
    """One solution a forward, padded rows: no batch neighbour or layout changes a step's score."""
    s = model.scorer
    problems = [
        StepProblem(PROBLEM["prompt"], tuple(map(tuple, PROBLEM["solutions"]))),
        StepProblem(ONE["prompt"], (tuple(ONE["completions"]),)),
    ]
    want = score_steps(
        s.model, tokenizer, PaddedLayout(tokenizer.pad_token_id), problems, max_length=s.max_length,
        separator=SEPARATOR, batch_size=1,
    )  # fmt: skip
    close(model.score_steps([PROBLEM, ONE]), [want[0], want[1][0]], 1e-6)


def test_the_separator_is_the_models_unless_given(model, folder, tokenizer):
    other = model.score_steps(PROBLEM, separator="\n\n")
    close(other, plain_step_probabilities(folder, tokenizer, PROBLEM, separator="\n\n"), 1e-5)
    assert max(abs(a - b) for a, b in zip(flat(other), flat(model.score_steps(PROBLEM)), strict=True)) > 1e-4
    with pytest.raises(ConfigError, match="separator must be a non-empty string"):
        model.score_steps(PROBLEM, separator="")


def test_math_shepherd_and_prm800k_records_are_read_as_their_steps(model):
    shepherd = {
        "input": "What is 3 + 4? Step 1: 3 + 4 = 7 ки\nStep 2: The answer is 7 ки",
        "label": "What is 3 + 4? Step 1: 3 + 4 = 7 +\nStep 2: The answer is 7 +",
        "task": "GSM8K",
    }
    steps = {"prompt": "What is 3 + 4?", "completions": ["Step 1: 3 + 4 = 7", "Step 2: The answer is 7"]}
    assert model.score_steps(shepherd) == model.score_steps(steps)
    rated = [{"completions": [{"text": t, "rating": 1, "flagged": False}], "chosen_completion": 0} for t in ("7", "ok")]
    prm800k = {
        "question": {"problem": "What is 3 + 4?", "ground_truth_answer": "7"},
        "label": {"steps": rated, "finish_reason": "solution"},
        "labeler": "someone",
        "timestamp": "2022-07-17T16:56:51",
    }
    assert model.score_steps(prm800k) == model.score_steps({"prompt": "What is 3 + 4?", "completions": ["7", "ok"]})


def test_steps_past_max_length_are_none(folder, model, tokenizer):
    """max_length that holds the prompt and the first two steps of the second solution: a step whose piece ends
    past it is None, every other one as with room for all."""

    def length(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt = len(model.scorer.prefix) + length(PROBLEM["prompt"] + SEPARATOR)
    ends = [[prompt + sum(length(t + SEPARATOR) for t in steps[: k + 1]) for k in range(len(steps))]
            for steps in PROBLEM["solutions"]]  # fmt: skip
    room = ends[1][1]
    short = rm.load(folder, device="cpu", max_length=room).score_steps(PROBLEM)
    full = model.score_steps(PROBLEM)
    assert flat(short)[-1] is None and flat(short)[-2] is not None
    for got, want, solution_ends in zip(short, full, ends, strict=True):
        assert [p is None for p in got] == [end > room for end in solution_ends]
        assert [p for p in got if p is not None] == pytest.approx(
            want[: sum(e <= room for e in solution_ends)], abs=1e-6
        )


BAD = [
    (
        {"prompt": "p", "solutions": [["ok", 7]]},
        "input[3]: field 'solutions[0][1]' must be a string (a step), got a number",
    ),
    ({"prompt": "p", "solutions": [["ok", "  "]]}, "input[3]: field 'solutions[0][1]' is an empty step"),
    ({"prompt": "p", "solutions": [[]]}, "input[3]: field 'solutions[0]' is empty: a solution needs at least one step"),
    ({"prompt": "p", "solutions": "ok"}, "input[3]: field 'solutions' must be a list of solutions"),
    ({"solutions": [["ok"]]}, "input[3]: field 'prompt' must be a string (the problem), got missing"),
    ({"prompt": " ", "completions": ["ok"]}, "input[3]: field 'prompt' is empty"),
    ({"prompt": "p", "completions": ["a"], "solutions": [["a"]]}, "input[3]: give either 'solutions' or 'completions'"),
    ({"prompt": "p", "response": "a"}, "input[3]: give either 'solutions' or 'completions'"),
    ("a text", "input[3]: expected an object"),
]


@pytest.mark.parametrize(("bad", "message"), BAD, ids=[m.split(": ", 1)[1][:40] for _, m in BAD])
def test_a_bad_input_is_one_data_error_naming_it_and_its_field(model, bad, message):
    with pytest.raises(DataError) as e:
        model.score_steps([PROBLEM, ONE, PROBLEM, bad])
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_lone_bad_input_is_named_input_and_a_string_is_refused(model):
    with pytest.raises(DataError, match=r"^input: field 'completions\[0\]' is an empty step"):
        model.score_steps({"prompt": "p", "completions": [""]})
    with pytest.raises(DataError, match="takes a problem \\(a dict\\) or a list of them, got a str"):
        model.score_steps("What is 3 + 4?")


def test_score_points_a_stepwise_record_to_score_steps(model):
    with pytest.raises(DataError, match=r"^input\[1\]: a stepwise record asks for a score per step: use score_steps"):
        model.score(["a text", ONE])
