"""`rm score` on stepwise records: each gets `step_scores`, the record otherwise as it was, the numbers
`rm.load(...).score_steps` gives (1e-6, so plain transformers' through tests/api); Math-Shepherd and PRM800K files
too; a file that mixes stepwise records with records to reward stops naming the line, or skips it."""

import json

import pytest
from scoring.prm_exports import ONE, PROBLEM, flat, prm_export

import rm
from rm.cli import main as cli

SHEPHERD = {
    "input": "What is 2 * 5? Step 1: 2 * 5 = 10 ки\nStep 2: The answer is 10 ки",
    "label": "What is 2 * 5? Step 1: 2 * 5 = 10 +\nStep 2: The answer is 10 +",
    "task": "GSM8K",
}


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory):
    return prm_export(tokenizer, tmp_path_factory.mktemp("score-steps") / "prm")


@pytest.fixture(scope="module")
def api(folder):
    return rm.load(folder, device="cpu")


def write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def close(got, want) -> None:
    assert [x is None for x in flat(got)] == [x is None for x in flat(want)]
    assert [x for x in flat(got) if x is not None] == pytest.approx([x for x in flat(want) if x is not None], abs=1e-6)


def test_stepwise_records_get_step_scores_and_keep_their_fields(folder, api, tmp_path, capsys):
    records = [{**PROBLEM, "id": "a"}, {**ONE, "id": "b"}, {"id": "c", **SHEPHERD}, PROBLEM]
    out = tmp_path / "scored.jsonl"
    path = write(tmp_path / "steps.jsonl", records)
    assert cli(["score", "--model", str(folder), "--input", path, "--out", str(out), "--batch-size", "2"]) == 0
    scored = read(out)
    assert [{k: v for k, v in r.items() if k != "step_scores"} for r in scored] == records
    want = api.score_steps(records)
    for row, expected in zip(scored, want, strict=True):
        close(row["step_scores"], expected)
    assert [len(s) for s in scored[0]["step_scores"]] == [2, 3] and len(scored[1]["step_scores"]) == 2
    assert "scored 14 steps of 6 solutions in 4 records" in capsys.readouterr().out


def test_a_prm800k_file_and_steps_past_max_length(folder, api, tmp_path, capsys):
    rated = [
        {"completions": [{"text": t, "rating": 1, "flagged": False}], "chosen_completion": 0} for t in ("10", "ok")
    ]
    record = {"question": {"problem": "What is 2 * 5?"}, "label": {"steps": rated}, "labeler": "x", "timestamp": "t"}
    long = {"prompt": "What is 2 * 5?", "completions": ["2 * 5 = 10"] + ["and so on and so forth"] * 12}
    out = tmp_path / "scored.jsonl"
    path = write(tmp_path / "prm800k.jsonl", [record, long])
    args = ["score", "--model", str(folder), "--input", path, "--out", str(out), "--max-length", "48"]
    assert cli(args) == 0
    first, second = read(out)
    short = rm.load(folder, device="cpu", max_length=48)
    close(first["step_scores"], short.score_steps({"prompt": "What is 2 * 5?", "completions": ["10", "ok"]}))
    close(second["step_scores"], short.score_steps(long))
    assert second["step_scores"][0] is not None and second["step_scores"][-1] is None
    unscored = sum(p is None for p in second["step_scores"])
    assert f"{unscored} steps in 1 records have no score (null): past max_length=48" in capsys.readouterr().out


@pytest.mark.parametrize("first", ["stepwise", "reward"])
def test_a_file_of_both_kinds_stops_at_the_first_record_of_the_other_kind(folder, tmp_path, capsys, first):
    text = {"text": "\n\nHuman: hi\n\nAssistant: hello"}
    records = [PROBLEM, PROBLEM, text] if first == "stepwise" else [text, text, ONE]
    path = write(tmp_path / "mixed.jsonl", records)
    out = tmp_path / "scored.jsonl"
    assert cli(["score", "--model", str(folder), "--input", path, "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bars
    kind = "a record to reward in a file of stepwise records" if first == "stepwise" else "a stepwise record in a file"
    assert error.startswith(f"error: {path}:3: {kind}") and f"(from {path}:1)" in error
    assert not out.exists()


def test_with_skip_the_other_kind_is_left_out_and_counted(folder, api, tmp_path, capsys):
    text = {"text": "\n\nHuman: hi\n\nAssistant: hello"}
    path = write(tmp_path / "mixed.jsonl", [ONE, text, PROBLEM])
    out = tmp_path / "scored.jsonl"
    args = ["score", "--model", str(folder), "--input", path, "--out", str(out), "--on-bad-record", "skip"]
    assert cli(args) == 0
    scored = read(out)
    assert [r.get("prompt") for r in scored] == [ONE["prompt"], PROBLEM["prompt"]]
    close([r["step_scores"] for r in scored], api.score_steps([ONE, PROBLEM]))
    assert "skipped 1 bad records {'mixed_kinds': 1}" in capsys.readouterr().out


def test_records_to_reward_are_scored_as_before_by_a_process_reward_model(folder, api, tmp_path):
    """A process reward export is a one-output reward model to `rm score`: a text's reward is the head at its end."""
    text = "\n\nHuman: hi\n\nAssistant: hello"
    out = tmp_path / "scored.jsonl"
    assert (
        cli(
            [
                "score",
                "--model",
                str(folder),
                "--input",
                write(tmp_path / "t.jsonl", [{"text": text}]),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (row,) = read(out)
    assert row["reward"] == pytest.approx(api.score(text), abs=1e-6) and "step_scores" not in row
