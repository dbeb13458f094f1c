"""Only the leaderboards' own subsets and domains count: any other is scored apart, named in eval.json's notes,
on the console and in a training run's log, with the leaderboard name it nearly spells; RewardBench 2's Ties rule
is exactly the `Ties` subset's, and a repeated or malformed Ties id is refused when the records are read."""

import json
import logging
import re

import numpy as np
import pytest
from suite_helpers import SOURCES, fixture_items, items_of, written_rewards

from conftest import QUICKSTART
from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.errors import DataError
from rm.suites import rewardbench, rewardbench2, rm_bench
from rm.suites.catalog import get_suite, load_items


def test_near_misses_are_case_spaces_hyphens_or_a_typo():
    from rm.suites.subset_names import near_miss

    assert near_miss("ties", rewardbench2.SUBSETS) == "Ties"
    assert (
        near_miss("precise_if", rewardbench2.SUBSETS) == near_miss("Precise-IF", rewardbench2.SUBSETS) == "Precise IF"
    )
    assert near_miss("Factualty", rewardbench2.SUBSETS) == "Factuality"
    assert near_miss("Chat", rewardbench2.SUBSETS) is None
    assert near_miss("Safety Refuse", rm_bench.DATA_DOMAINS) == "safety-refuse"


def test_rewardbench2_scores_only_its_six_subsets_and_ties_only_by_name():
    """Factuality: [2, 1, 0, -1] -> 1, [1, 2, 0, 0] -> 0: 0.5, the score (the mean of the subsets present).
    `Chat` [5, 0, 0, 0] -> 1 would make it 0.75 if averaged in. A lower-case `ties` is not the leaderboard's Ties:
    best-of-k, where the Ties rule would give 1 + 0.01 tanh(1) (test_suite_rules): ref:1 [2 | 1, 0] -> 1,
    tied:1 [3, 2.5 | 1, 0] -> 1."""
    items = items_of(("Factuality", "1", 1, 3), ("Factuality", "2", 1, 3), ("Chat", "3", 1, 3),
                     ("ties", "ref:1", 1, 2), ("ties", "tied:1", 2, 2))  # fmt: skip
    rewards = [np.array(r, float) for r in ([2, 1, 0, -1], [1, 2, 0, 0], [5, 0, 0, 0], [2, 1, 0], [3, 2.5, 1, 0])]
    block = rewardbench2.suite_block(items, rewards)
    assert block["score"] == 0.5 and block["sections"] == {"Factuality": 0.5}
    assert block["subsets"]["Chat"] == {"score": 1.0, "n": 1, "kind": "best-of-4", "in_score": False}
    assert block["subsets"]["ties"] == {"score": 1.0, "n": 2, "kind": "best-of-3..4", "in_score": False}
    unknown = block["notes"][1]
    assert "2 subset(s) not in RewardBench 2's leaderboard, scored apart and left out of the score" in unknown
    assert "'Chat' (1 record)" in unknown and "'ties' (2 records; did you mean 'Ties'?)" in unknown
    assert "Precise IF, Math, Safety, Focus, Ties of RewardBench 2 are not in the data" in block["notes"][0]


def test_rm_bench_scores_only_its_five_domains():
    """chat [3, 1, 5 | 2, 4, 0]: 6 of 9 cells, the score; `safety-other` (3 of 9) was read as Safety and `Chat`
    (6 of 9) as a domain of its own: both are scored apart, outside the score and the pooled `all`."""
    items = items_of(("chat", "1", 3, 3), ("safety-other", "2", 3, 3), ("Chat", "3", 3, 3))
    rewards = [np.array([3, 1, 5, 2, 4, 0.0]), np.array([0, 0, 0, 1, 1, -1.0]), np.array([1, 1, 1, 0, 2, 0.0])]
    block = rm_bench.suite_block(items, rewards)
    assert block["score"] == pytest.approx(2 / 3) and list(block["sections"]) == ["chat", "all"]
    assert block["matrix"]["domains"]["all"] == block["matrix"]["domains"]["chat"] == [[1, 0, 1], [0, 0, 1], [1, 1, 1]]
    assert block["subsets"]["safety-other"] == {"n": 1, "domain": None, "in_score": False, "average": 1 / 3}
    assert "'Chat' (1 record; did you mean 'chat'?)" in block["notes"][1] and "'safety-other'" in block["notes"][1]


def test_rewardbench_names_a_near_miss_subset():
    items = items_of(("alpacaeval-easy", "1", 1, 1), ("Alpacaeval Easy", "2", 1, 1))
    block = rewardbench.suite_block(items, [np.array([1, 0.0]), np.array([0, 1.0])])
    assert block["sections"]["Chat"] == 1.0 and block["subsets"]["Alpacaeval Easy"]["in_score"] is False
    assert "'Alpacaeval Easy' (1 record; did you mean 'alpacaeval-easy'?)" in block["notes"][1]


def with_lines(tmp_path, *records: dict):
    """The RewardBench 2 fixture (16 records) with `records` appended as lines 17, 18, ..."""
    lines = SOURCES["rewardbench2"].read_text().splitlines() + [json.dumps(r) for r in records]
    path = tmp_path / "rb2.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_repeated_ties_id_is_refused_naming_its_line_and_field(tmp_path):
    """Line 11 is ref:1 and line 15 ref:3; a second ref:1 and a `ref:03` would replace their prompts' records
    (RewardBench's own script merges them response by response)."""
    rows = [json.loads(line) for line in SOURCES["rewardbench2"].read_text().splitlines()]
    path = with_lines(tmp_path, rows[10], {**rows[14], "id": "ref:03"})
    with pytest.raises(DataError, match=re.escape(f"{path}:17: field 'id': Ties id 'ref:1' repeats that of {path}:11")):
        fixture_items("rewardbench2", source=path)
    report = DataReport("skip")
    items = load_items(get_suite("rewardbench2"), str(path), "", Renderer(None), report)
    assert len(items) == 16 and report.skipped_counts() == {"duplicate_id": 2}
    bad = with_lines(tmp_path, {**rows[10], "id": "42"})
    with pytest.raises(DataError, match=re.escape(f"{bad}:17: field 'id' of a Ties record must be ref:N or tied:N")):
        fixture_items("rewardbench2", source=bad)


def test_a_subset_asked_for_by_a_near_miss_is_named():
    with pytest.raises(DataError, match=re.escape("no records of subset(s) 'ties' (did you mean 'Ties'?)")):
        load_items(get_suite("rewardbench2"), str(SOURCES["rewardbench2"]), "", Renderer(None), DataReport("error"),
                   ["ties"])  # fmt: skip


@pytest.mark.slow
def test_rm_eval_warns_of_each_note_on_the_console(exported_tiny, tmp_path, capsys):
    from rm.cli import main as cli

    rows = json.loads(SOURCES["rm-bench"].read_text())
    source = tmp_path / "rmb.json"
    source.write_text(json.dumps([{**rows[0], "domain": "Chat"}, *rows[1:]]))
    out = tmp_path / "eval"
    argv = ["eval", "--model", str(exported_tiny), "--suite", "rm-bench", "--data", str(source), "--out", str(out)]
    assert cli([*argv, "--bootstrap-samples", "20"]) == 0
    err = capsys.readouterr().err
    suite = json.loads((out / "eval.json").read_text())["suite"]
    warned = [line for line in err.splitlines() if line.startswith("warning: rm-bench: ")]
    assert warned == [f"warning: rm-bench: {note}" for note in suite["notes"]] and len(warned) == 1
    assert "'Chat' (1 record; did you mean 'chat'?)" in warned[0] and "Chat" not in suite["sections"]
    items = fixture_items("rm-bench", source=source)
    kept = [(i, r) for i, r in zip(items, written_rewards(out), strict=True) if i.subset != "Chat"]
    assert suite["score"] == pytest.approx(rm_bench.suite_block(*map(list, zip(*kept, strict=True)))["score"])


def test_a_training_run_warns_of_each_note_when_it_starts(tokenizer, tmp_path, caplog):
    from accelerate import Accelerator

    from rm.config import load_config
    from rm.training.suite_evals import SuiteEvals

    rows = [json.loads(line) for line in SOURCES["rewardbench2"].read_text().splitlines()]
    source = tmp_path / "rb2.jsonl"
    source.write_text("".join(json.dumps({**r, "subset": r["subset"].lower()}) + "\n" for r in rows))
    cfg = load_config(QUICKSTART, [f"train.eval_suites=[{{suite: rewardbench2, data: {source}}}]",
                                   f"output_dir={tmp_path / 'run'}"])  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="rm"):
        SuiteEvals(cfg, tokenizer, Accelerator())
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2 and all(w.startswith("suite rewardbench2: ") for w in warned)
    assert "'ties' (6 records; did you mean 'Ties'?)" in warned[1] and "'precise if'" in warned[1]
