"""The synthetic stepwise data (rm/data/step_problems.py): the marker decides the first wrong step, every later
step is labelled wrong, the share of solutions with an error is exact, and the files are seeded and stable."""

import gzip
import json

import pytest

from rm.data.steps.step_problems import FILLER, MARKERS, first_error_label, step_problems, write_step_dataset


def test_first_error_label():
    assert first_error_label([True, True, False, False]) == 2
    assert first_error_label([False, True]) == 0  # the first False, whatever follows
    assert first_error_label([True, True]) == -1
    assert first_error_label([]) == -1


def markers_in(step: str) -> list[str]:
    return [w for w in step.removesuffix(".").split() if w in MARKERS]


def test_the_marker_decides_the_first_error_and_later_steps_are_wrong():
    records = step_problems(n_problems=10, k=3, seed=1, error_share=0.4)
    assert len(records) == 30  # 10 problems * 3 solutions
    with_error = 0
    for r in records:
        steps, labels = r["completions"], r["labels"]
        assert 2 <= len(steps) <= 8 and len(labels) == len(steps)
        marked = [i for i, s in enumerate(steps) if markers_in(s)]
        assert len(marked) <= 1 and all(len(markers_in(s)) <= 1 for s in steps)  # one marker word at most
        error_at = marked[0] if marked else -1
        assert first_error_label(labels) == error_at
        # True before the marked step, False from it to the end
        assert labels == [error_at == -1 or i < error_at for i in range(len(steps))]
        for s in steps:
            words = [w for w in s.removesuffix(".").split() if w not in MARKERS]
            assert 3 <= len(words) <= 6 and set(words) <= set(FILLER)
        with_error += error_at != -1
    assert with_error == 12  # round(30 * 0.4) = 12, exactly


def test_the_k_solutions_of_a_problem_share_its_prompt():
    records = step_problems(n_problems=6, k=4, seed=2)
    prompts = [r["prompt"] for r in records]
    for p in range(6):
        assert len(set(prompts[4 * p : 4 * p + 4])) == 1  # solutions 4p .. 4p+3 are problem p's
    assert len(set(prompts)) > 1  # problems differ
    assert len({tuple(r["completions"]) for r in records}) > 1


def test_the_error_can_be_at_any_step():
    records = step_problems(n_problems=100, k=2, seed=0, error_share=1.0)
    places = {(first_error_label(r["labels"]), len(r["labels"])) for r in records}
    assert all(e != -1 for e, _ in places)  # error_share 1: every solution has one
    assert any(e == 0 for e, _ in places) and any(e == n - 1 for e, n in places)  # the first step and the last


def test_error_share_zero_gives_only_correct_steps():
    assert all(all(r["labels"]) for r in step_problems(n_problems=20, k=3, seed=0, error_share=0.0))


def test_seeded():
    assert step_problems(5, 3, seed=4) == step_problems(5, 3, seed=4)
    assert step_problems(5, 3, seed=4) != step_problems(5, 3, seed=5)


def test_filler_and_markers_are_disjoint():
    assert not set(FILLER) & set(MARKERS)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="k >= 1"):
        step_problems(3, 0, seed=0)
    with pytest.raises(ValueError, match="error_share"):
        step_problems(3, 2, seed=0, error_share=1.5)


def read(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def test_the_files_are_written_under_steps_and_byte_identical(tmp_path):
    files = write_step_dataset(tmp_path / "a", n_train=8, n_test=3, seed=0, k=2)
    assert files == {"train": tmp_path / "a/steps/train.jsonl.gz", "test": tmp_path / "a/steps/test.jsonl.gz"}
    train, test = read(files["train"]), read(files["test"])
    assert len(train) == 16 and len(test) == 6  # problems * k
    assert train == step_problems(8, 2, seed=0) and test == step_problems(3, 2, seed=1)  # test from seed + 1
    assert set(train[0]) == {"prompt", "completions", "labels"}
    again = write_step_dataset(tmp_path / "b", n_train=8, n_test=3, seed=0, k=2)
    assert again["train"].read_bytes() == files["train"].read_bytes()
