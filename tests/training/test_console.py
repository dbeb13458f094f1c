"""What `rm train` says on the console: a K-response run counts groups (with their K) and ends with the group
metrics and suite scores that eval.json holds; a pairwise run keeps its pairs; paths are shown as the user typed
them (relative to the working directory), in the resume hint after a Ctrl-C and in the summary."""

import json
import logging
import os
import signal
from pathlib import Path

import pytest
from group_data import write_groups

from conftest import QUICKSTART, SHORT, TINY_MODEL
from rm.config import load_config
from rm.evaluation.summary import TOKENS
from rm.training.console import resume_hint
from rm.training.run import main

SUITE_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "rewardbench2_suite.jsonl"


def shown(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def test_a_group_run_counts_groups_and_ends_with_its_rankings_and_suite_scores(tmp_path, capsys, caplog):
    data = write_groups(tmp_path / "groups.jsonl", 120, seed=1)
    suites = f"[{{suite: rewardbench2, data: {SUITE_FILE}}}]"
    overrides = [
        f"data.source={data}", "data.eval_split=", "data.eval_fraction=0.2", *TINY_MODEL, "collator.max_length=64",
        "train.batch_size=8", "train.eval_batch_size=16", "train.max_steps=4", "train.eval_steps=2",
        "train.report_to=[]", "train.num_threads=1", "export.enabled=false", f"train.eval_suites={suites}",
        f"output_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    periodic = {}
    with caplog.at_level(logging.INFO, logger="rm"):
        result = main(load_config(QUICKSTART, overrides), on_eval=lambda step, r: periodic.update({step: r}))
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "run" / "eval.json").read_text())
    groups = saved["overall"]["groups"]
    said = [r.getMessage() for r in caplog.records]
    line = next(m for m in said if m.startswith("data: ") and " train " in m and "loaded" not in m)  # not the load's
    assert "train groups (K=2-5) {" in line and f", {groups} eval groups (K=" in line and "pairs" not in line
    assert any(m.startswith("data: ") and m.endswith(" eval groups loaded") for m in said)  # the load's line too

    # The summary shows the group metrics eval.json holds, per subset and overall, and the suite's last score.
    summary = out[out.index("held-out accuracy after 4 steps") :]
    ranking = summary[summary.index("top-1") :].splitlines()
    overall = next(row for row in ranking if row.startswith("overall"))
    o = saved["overall"]
    assert overall.split() == ["overall", *(shown(o[k]) for k in ("top1_accuracy", "best_of_k_accuracy",
                                                                  "kendall_tau")), str(groups)]  # fmt: skip
    for name, m in saved["subsets"].items():
        row = next(r for r in ranking if r.startswith(name + " "))
        assert row.split()[1:4] == [shown(m[k]) for k in ("top1_accuracy", "best_of_k_accuracy", "kendall_tau")]
    suite = saved["suites"]["rewardbench2"]
    assert suite["step"] == 4 and result["suites"] == saved["suites"]
    assert f"suite rewardbench2 (step 4): score {shown(suite['score'])}; Factuality " in summary
    # A periodic eval's result carries the suites scored with it: a sweep judged by a suite can prune on it.
    assert periodic[2]["suites"]["rewardbench2"]["step"] == 2


def test_a_pair_run_shows_no_rankings_and_its_run_directory_as_typed(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(QUICKSTART, [*SHORT, "export.enabled=false", "train.save_steps=0", "output_dir=runs/pairs"])
    with caplog.at_level(logging.INFO, logger="rm"):
        main(cfg)
    out = capsys.readouterr().out
    assert "train pairs {" in caplog.text and "eval pairs" in caplog.text and "groups (K=" not in caplog.text
    assert "held-out accuracy after 2 steps" in out and "top-1" not in out and "suite " not in out
    length = next(line for line in out.splitlines() if line.startswith("length (tokens): longer wins "))
    assert "best-of-K" not in length  # pairs: their best-of-K is their accuracy
    assert out.rstrip().endswith("run directory: runs/pairs")


def test_the_resume_hint_shows_the_config_path_as_typed(tmp_path, monkeypatch, capsys):
    """A Ctrl-C in a run started from tmp_path with output_dir=runs/x: the hint names runs/x/config.yaml, which
    the user can paste, not the absolute path the run keeps in its config."""
    monkeypatch.chdir(tmp_path)
    sent = []

    def ctrl_c(batch, loss):
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)

    cfg = load_config(QUICKSTART, [*SHORT, "train.max_steps=4", "export.enabled=false", "output_dir=runs/x"])
    result = main(cfg, on_batch=ctrl_c)
    out = capsys.readouterr().out
    assert result["interrupted"]
    assert "continue with: python -m rm train runs/x/config.yaml train.resume=auto" in out
    assert str(tmp_path) not in out


@pytest.mark.parametrize(
    "given, want",
    [("runs/x", "runs/x"), ("./runs/x", "runs/x"), ("{here}/runs/x", "runs/x"), ("../elsewhere", "../elsewhere"),
     ("{tmp}/elsewhere", "{tmp}/elsewhere")],
)  # fmt: skip
def test_a_path_under_the_working_directory_is_relative_and_one_outside_is_as_given(tmp_path, monkeypatch, given, want):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    given, want = (s.format(here=here, tmp=tmp_path) for s in (given, want))
    config = Path(os.path.abspath(given)) / "config.yaml"
    assert resume_hint(config, given).startswith(f"continue with: python -m rm train {want}/config.yaml train.resume=")


def write_longer_wins(path: Path, n: int) -> Path:
    """Groups of 2 to 4 responses, each better-ranked one longer by whole words than the next: length alone ranks
    every group right, in characters and in tokens alike."""
    with open(path, "w") as f:
        for i in range(n):
            k = 2 + i % 3
            texts = [f"answer {i % 7}" + " and more" * (k - j) for j in range(k)]
            responses = [{"text": t, "score": float(k - j)} for j, t in enumerate(texts)]
            f.write(json.dumps({"prompt": f"question {i}?", "responses": responses, "subset": "s"}) + "\n")
    return path


def test_a_run_ends_with_the_length_line_where_the_longest_answer_always_wins(tmp_path, capsys):
    """The run's own eval measures lengths in tokens (it keeps no text): the longer answer wins every pair, the
    longest pick every group, the shortest none, in eval.json and on the summary's length line."""
    data = write_longer_wins(tmp_path / "longer.jsonl", 48)
    overrides = [
        f"data.source={data}", "data.eval_split=", "data.eval_fraction=0.25", *TINY_MODEL, "collator.max_length=64",
        "train.batch_size=8", "train.eval_batch_size=16", "train.max_steps=2", "train.report_to=[]",
        "train.num_threads=1", "export.enabled=false", f"output_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    main(load_config(QUICKSTART, overrides))
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "run" / "eval.json").read_text())
    o = saved["overall"]
    assert saved["length_unit"] == TOKENS and o["groups"] == 12
    assert (o["longer_chosen_rate"], o["longest_best_of_k"], o["shortest_best_of_k"]) == (1.0, 1.0, 0.0)
    line = next(x for x in out[out.index("held-out accuracy") :].splitlines() if x.startswith("length ("))
    assert line.startswith("length (tokens): longer wins 1.000 of pairs (longer wins 1.000); model prefers longer ")
    assert f"|pearson(reward, tokens)| {o['reward_length_abs_pearson']:.3f}" in line
    assert line.endswith(f"best-of-K {o['best_of_k_accuracy']:.3f} against longest pick 1.000, shortest pick 0.000")
