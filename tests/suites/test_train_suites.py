"""train.eval_suites: a two-step run scores RM-Bench and RewardBench 2 at each eval and at its end, logs their
sections to the tracker and to suites.jsonl, and the last numbers are the ones `rm eval --suite` gives its export."""

import json

import pytest
from suite_helpers import SOURCES, score
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import QUICKSTART, SHORT
from rm.config import load_config
from rm.training.run import main


@pytest.mark.slow
def test_a_run_logs_each_suites_sections_at_each_eval(tmp_path):
    suites = (
        f"[{{suite: rm-bench, data: {SOURCES['rm-bench']}}}, {{suite: rewardbench2, data: {SOURCES['rewardbench2']}}}]"
    )
    cfg = load_config(QUICKSTART, [*SHORT, "train.eval_steps=1", "train.report_to=[tensorboard]",
                                   f"train.eval_suites={suites}", f"output_dir={tmp_path}"])  # fmt: skip
    main(cfg)
    rows = [json.loads(line) for line in (tmp_path / "suites.jsonl").read_text().splitlines()]
    assert [(r["step"], r["suite"]) for r in rows] == [(1, "rm-bench"), (1, "rewardbench2"), (2, "rm-bench"),
                                                      (2, "rewardbench2")]  # fmt: skip
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    for tag in (
        "suite/rm-bench/score",
        "suite/rm-bench/chat/hard",
        "suite/rewardbench2/Ties",
        "suite/rewardbench2/score",
    ):
        assert [e.step for e in events.Scalars(tag)] == [1, 2], tag
    # The last eval's numbers are the final model's: what `rm eval --suite` gives the export.
    for row in rows[2:]:
        final = score(tmp_path / "export", row["suite"]).result["suite"]
        assert row["score"] == pytest.approx(final["score"], abs=1e-5)
        assert events.Scalars(f"suite/{row['suite']}/score")[-1].value == pytest.approx(final["score"], abs=1e-5)
