"""`accelerate launch ... rm eval --model A B C`: two and three CPU processes write the eval.json and rewards.jsonl
one process writes, each member's rewards gathered exactly once (61 pairs in batches of 8: on three processes one
process scores a pair again in the last round, a filler that gathering drops). The launches are the session's
shared ones (tests/launched/scenarios.py's `eval_ensemble`)."""

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import tiny_model
from rm.cli import main as cli_main
from rm.config import RunConfig
from rm.data import synthetic
from rm.export.folder import Weights, export_model

SEEDS = (0, 1, 2)


def write_inputs(folder: Path, tokenizer_folder: str) -> None:
    """What the scenario scores: three tiny members of different seeds with the tokenizer of `tokenizer_folder`,
    and 61 generated eval pairs (a number that neither batches of 8 nor 2 or 3 processes divide)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    for seed in SEEDS:
        export_model(
            tiny_model(tokenizer, seed=seed), tokenizer, folder / f"seed{seed}", RunConfig(), Weights(None, None)
        )
    synthetic.write_dataset(folder / "data", n_train=3, n_eval=61, seed=11)


def ensemble_argv(folder: Path, out: Path) -> list[str]:
    """`rm eval` of the three members on the 61 pairs, in batches of 8."""
    members = [str(folder / f"seed{seed}") for seed in SEEDS]
    return ["eval", "--model", *members, "--data", str(folder / "data"), "--out", str(out), "--batch-size", "8",
            "--bootstrap-samples", "100"]  # fmt: skip


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_n_processes_write_what_one_process_writes(launched, processes, tmp_path):
    folder = launched(processes).out("eval_ensemble")
    assert cli_main(ensemble_argv(folder, tmp_path / "one")) == 0  # one process, the same members and pairs
    one, many = (json.loads((out / "eval.json").read_text()) for out in (tmp_path / "one", folder / "run"))
    assert many["eval"]["processes"] == processes and one["eval"]["processes"] == 1
    assert many["overall"]["n"] == one["overall"]["n"] == 61
    rows = {"one": rows_of(tmp_path / "one"), "many": rows_of(folder / "run")}
    assert [r["origin"] for r in rows["many"]] == [r["origin"] for r in rows["one"]]  # each pair once, in order
    for key in (
        "chosen_reward",
        "rejected_reward",
        "chosen_reward_members",
        "rejected_reward_std",
        "rejected_reward_conservative",
    ):
        got, want = (np.array([r[key] for r in rows[n]]) for n in ("many", "one"))
        assert got.shape == want.shape and np.allclose(got, want, rtol=0, atol=1e-6), key
    block, ref = many["ensemble"], one["ensemble"]
    for got, want in [*zip(block["members"], ref["members"], strict=True), (block["mean"], ref["mean"]),
                      (block["conservative"], ref["conservative"])]:  # fmt: skip
        assert got["overall"] == want["overall"] and got["subsets"] == want["subsets"]
    # The counts and AUCs exactly; each side's mean std to the rewards' own 1e-6 (a process's BLAS may sum a row in
    # another order with its share of the cores, which moves a reward in its last bits on some CPUs).
    got, want = dict(block["uncertainty"]), dict(ref["uncertainty"])
    for key in ("mean_std_wrong", "mean_std_right"):
        assert got.pop(key) == pytest.approx(want.pop(key), rel=0, abs=1e-6)
    assert got == want
    assert many["overall"]["accuracy"] == one["overall"]["accuracy"]
