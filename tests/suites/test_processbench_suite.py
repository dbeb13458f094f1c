"""ProcessBench's records and numbers without a model: the published fields read from a folder of splits or one
file, bad records named, and eval.json's block for step probabilities chosen by hand (the expected numbers worked
out in each docstring), cut and non-finite items included."""

import json
from pathlib import Path

import pytest

from rm.config.suite_config import SUITE_NAMES
from rm.data.data_report import DataReport
from rm.errors import ConfigError, DataError
from rm.suites.catalog import SUITE_NAMES as CATALOG_NAMES
from rm.suites.catalog import get_suite
from rm.suites.steps.bench_block import bench_block, bench_markdown, bench_table, prediction
from rm.suites.steps.bench_records import BenchItem, load_bench

BENCH = Path(__file__).resolve().parent / "fixtures" / "processbench"


def test_the_suite_is_named_alike_in_the_catalog_the_config_and_the_command_line():
    from rm.cli.evaluate import SUITES

    assert tuple(SUITES) == SUITE_NAMES == CATALOG_NAMES and "processbench" in SUITE_NAMES
    with pytest.raises(ConfigError, match="scores steps, not pairs"):
        get_suite("processbench")


def test_a_folder_is_read_split_by_split_with_the_published_fields():
    items = load_bench(str(BENCH), "", None, DataReport("error"))
    lines = {s: (BENCH / f"{s}.jsonl").read_text().splitlines() for s in ("gsm8k", "math", "olympiadbench", "omnimath")}
    assert [i.split for i in items] == [s for s, rows in lines.items() for _ in rows]
    record = json.loads(lines["math"][1])
    got = next(i for i in items if i.id == "math-1")
    assert (got.problem, list(got.steps), got.label) == (record["problem"], record["steps"], record["label"])
    assert (got.generator, got.final_answer_correct) == (record["generator"], False)
    assert got.origin == f"{BENCH / 'math.jsonl'}:2"
    two = load_bench(str(BENCH), "", ["omnimath", "math"], DataReport("error"))
    assert [i.split for i in two] == ["omnimath"] * 3 + ["math"] * 4


def test_a_download_of_json_arrays_reads_as_the_jsonl_fixture(tmp_path):
    """The Hub repository holds `<split>.json`, one JSON array per split: a folder of them reads alike."""
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        rows = [json.loads(line) for line in (BENCH / f"{split}.jsonl").read_text().splitlines()]
        (tmp_path / f"{split}.json").write_text(json.dumps(rows, indent=1))
    arrays, lines = (load_bench(str(s), "", None, DataReport("error")) for s in (tmp_path, BENCH))
    assert [(i.split, i.id, i.problem, i.steps, i.label) for i in arrays] == [
        (i.split, i.id, i.problem, i.steps, i.label) for i in lines
    ]
    assert {i.split for i in load_bench(str(tmp_path / "omnimath.json"), "", None, DataReport("error"))} == {"omnimath"}


def test_a_file_is_one_split_named_by_its_file_or_by_split(tmp_path):
    assert {i.split for i in load_bench(str(BENCH / "math.jsonl"), "", None, DataReport("error"))} == {"math"}
    mine = tmp_path / "mine.jsonl"
    mine.write_text((BENCH / "gsm8k.jsonl").read_text())
    assert {i.split for i in load_bench(str(mine), "", None, DataReport("error"))} == {"mine"}
    assert {i.split for i in load_bench(str(mine), "gsm8k", None, DataReport("error"))} == {"gsm8k"}
    with pytest.raises(DataError, match="holds split 'mine'"):
        load_bench(str(mine), "", ["gsm8k"], DataReport("error"))
    with pytest.raises(ConfigError, match="not both"):
        load_bench(str(BENCH), "gsm8k", ["math"], DataReport("error"))
    with pytest.raises(DataError, match=r"did you mean 'gsm8k'\?"):
        load_bench(str(BENCH), "gsm8K", None, DataReport("error"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"label": 3}, "'label' is 3: not -1 or a step index of 3 steps"),
        ({"label": True}, "'label' must be -1 or a step index, got bool"),
        ({"label": None}, "'label' must be -1 or a step index, got missing"),
        ({"steps": "one step"}, "'steps' must be a non-empty list"),
        ({"steps": []}, "'steps' must be a non-empty list"),
        ({"steps": ["a", 2, "c"]}, "'steps\\[1\\]' must be a string"),
        ({"problem": None}, "'problem' is missing"),
        ({"final_answer_correct": "yes"}, "'final_answer_correct' must be true or false"),
    ],
)
def test_a_bad_record_is_named_by_its_line_or_skipped_and_counted(tmp_path, change, message):
    rows = [json.loads(line) for line in (BENCH / "gsm8k.jsonl").read_text().splitlines()]
    source = tmp_path / "gsm8k.jsonl"
    source.write_text("".join(json.dumps({**r, **(change if k == 1 else {})}) + "\n" for k, r in enumerate(rows)))
    with pytest.raises(DataError, match=f"gsm8k.jsonl:2: field {message}"):
        load_bench(str(source), "", None, DataReport("error"))
    report = DataReport("skip")
    assert [i.id for i in load_bench(str(source), "", None, report)] == ["gsm8k-0", "gsm8k-2", "gsm8k-3"]
    assert sum(report.skipped_counts().values()) == 1


def item(split: str, label: int, steps: int) -> BenchItem:
    return BenchItem(split, "p", tuple(f"s{k}" for k in range(steps)), label, f"hand:{split}")


HAND = [  # (item, step probabilities, steps cut)
    (item("gsm8k", -1, 2), [0.9, 0.8], 0),  # A: nothing flagged, correct: right
    (item("gsm8k", 1, 3), [0.9, 0.3, 0.2], 0),  # B: step 1 flagged first, the error: right
    (item("gsm8k", 0, 2), [0.7, 0.6], 0),  # C: an error missed: wrong
    (item("gsm8k", -1, 2), [0.9, None], 1),  # D: its second step cut: left out
    (item("gsm8k", -1, 2), [None, 0.9], 0),  # E: a non-finite output: wrong
    (item("math", 2, 3), [0.9, 0.4, 0.1], 0),  # F: flagged at 1, the error is at 2: wrong (detection: right)
    (item("math", -1, 1), [0.95], 0),  # G: right
    (item("math", 0, 2), [0.2, None], 0),  # I: a non-finite output: wrong, although step 0 is flagged
    (item("mine", -1, 1), [0.1], 0),  # H: a split ProcessBench lacks: scored apart
]


def test_the_papers_f1_and_the_detection_f1_by_hand():
    """gsm8k: erroneous B right, C wrong -> 1/2; correct A right, E wrong (D left out) -> 1/2; F1 = 0.5.
    math: erroneous F and I wrong -> 0; correct G right -> 1; F1 = 2 * 0 * 1 / 1 = 0. score = (0.5 + 0) / 2 = 0.25
    (the two splits read). Detection over gsm8k and math: flagged and erroneous B, F (tp 2); flagged and correct
    E, counted as flagged at step 0 (fp 1); erroneous and not flagged C, and I counted so (fn 2): P = 2/3, R = 1/2,
    F1 = 2 * (2/3) * (1/2) / (7/6) = 4/7. "mine": H flagged, correct -> correct_acc 0, no erroneous item, F1 null,
    outside the score."""
    items, probs, cut = (list(x) for x in zip(*HAND, strict=True))
    block = bench_block(items, probs, cut)
    assert block["score"] == pytest.approx(0.25) and block["sections"] == pytest.approx({"gsm8k": 0.5, "math": 0.0})
    gsm8k, math, mine = (block["splits"][s] for s in ("gsm8k", "math", "mine"))
    assert gsm8k == pytest.approx({"items": 5, "scored": 4, "left_out_cut": 1, "nonfinite_wrong": 1,
                                   "erroneous_acc": 0.5, "correct_acc": 0.5, "f1": 0.5, "n_erroneous": 2,
                                   "n_correct": 2, "detection_precision": 0.5, "detection_recall": 0.5,
                                   "detection_f1": 0.5, "detection_tp": 1, "detection_fp": 1, "detection_fn": 1,
                                   "in_score": True})  # fmt: skip
    assert (math["erroneous_acc"], math["correct_acc"], math["f1"], math["n_erroneous"]) == (0.0, 1.0, 0.0, 2)
    assert (mine["correct_acc"], mine["erroneous_acc"], mine["f1"], mine["in_score"]) == (0.0, None, None, False)
    pooled = block["error_detection"]
    assert (pooled["detection_tp"], pooled["detection_fp"], pooled["detection_fn"]) == (2, 1, 2)
    assert pooled["detection_f1"] == pytest.approx(4 / 7) and pooled["detection_precision"] == pytest.approx(2 / 3)
    assert (block["items"], block["left_out_cut"], block["nonfinite_wrong"]) == (9, 1, 2)
    notes = "\n".join(block["notes"])
    assert "olympiadbench, omnimath of ProcessBench not read" in notes and "'mine' (1 record)" in notes
    assert "1 item(s) with steps past max_length (gsm8k 1) are left out" in notes
    assert "2 item(s) have a step output that is not finite" in notes
    assert [prediction(p, c) for _, p, c in HAND] == [-1, 1, -1, None, None, 1, -1, None, 0]
    table = bench_table(block)
    assert "ProcessBench F1 0.2500" in table and "detection F1 0.5714" in table and "mine (not in score)" in table
    assert "| gsm8k | 5 | 1 | 2 | 0.5000 | 2 | 0.5000 | 0.5000 |" in bench_markdown(block)


def test_a_split_with_no_judged_item_leaves_the_score_null():
    """Every gsm8k item cut: gsm8k has no F1, so the paper's mean of every split's F1 is undefined (null), not the
    mean of the others."""
    block = bench_block([item("gsm8k", -1, 2), item("math", 0, 1), item("math", -1, 1)],
                        [[0.9, None], [0.1], [0.9]], [1, 0, 0])  # fmt: skip
    assert block["splits"]["math"]["f1"] == 1.0 and block["splits"]["gsm8k"]["f1"] is None
    assert block["score"] is None and block["sections"] == {"gsm8k": None, "math": 1.0}
    assert any(n.startswith("score is null: split(s) gsm8k have no F1") for n in block["notes"])
