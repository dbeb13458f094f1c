"""`merge: {top_k: K}` in a sweep: once its trials end, the K best finished ones (by the sweep's objective) are
averaged into <sweep_dir>/merged by `rm merge`'s own code; too few finished trials is one line."""

import json

import pytest
import yaml
from safetensors.torch import load_file

from conftest import REPO, TINY
from rm.cli import main as cli


@pytest.mark.slow
def test_the_best_trials_are_merged_when_the_sweep_ends(tmp_path, capsys):
    raw = {
        "base": str(REPO / "configs" / "quickstart.yaml"), "sweep_dir": str(tmp_path / "sweep"), "sampler": "grid",
        "overrides": [*TINY, "train.max_steps=6", "train.eval_steps=0", "train.seed=7", "export.enabled=true"],
        "pruning": {"pruner": "none"}, "space": {"train.data_seed": [1, 2, 3]}, "merge": {"top_k": 2},
    }  # fmt: skip
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert cli(["sweep", str(tmp_path / "s.yaml")]) == 0
    merged = tmp_path / "sweep" / "merged"
    assert f"merged the 2 best trials into {merged}" in capsys.readouterr().out
    trials = sorted((tmp_path / "sweep" / "trials").iterdir())
    accuracy = {t: json.loads((t / "eval.json").read_text())["overall"]["accuracy"] for t in trials}
    best = sorted(trials, key=lambda t: -accuracy[t])[:2]
    got = load_file(merged / "model.safetensors")
    members = [load_file(t / "export" / "model.safetensors") for t in best]
    assert all(((got[k] - (members[0][k] + members[1][k]) / 2).abs() <= 1e-6).all() for k in got)
    assert "## Merged from" in (merged / "README.md").read_text()


def test_too_few_finished_trials_to_merge_is_one_line(tmp_path, capsys):
    raw = {
        "base": str(REPO / "configs" / "quickstart.yaml"), "sweep_dir": str(tmp_path / "sweep"), "sampler": "grid",
        "overrides": ["train.max_steps=0"], "pruning": {"pruner": "none"}, "space": {"train.lr": [1e-3]},
        "merge": {"top_k": 3},
    }  # fmt: skip
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    import rm.sweep.driver

    def stand_in(trial, *args) -> dict:
        return {"overall": {"accuracy": 0.5, "loss": 1.0}, "subsets": {}}

    mp = pytest.MonkeyPatch()
    mp.setattr(rm.sweep.driver, "run_in_process", stand_in)
    try:
        assert cli(["sweep", str(tmp_path / "s.yaml")]) == 2
    finally:
        mp.undo()
    assert "merge.top_k=3: the sweep has 1 finished trials; merge needs 3" in capsys.readouterr().err
