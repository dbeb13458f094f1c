"""A process reward model learns which steps are wrong: on the repo's generated stepwise data (a step is wrong when
it holds a marker word; a problem's solutions share its prompt), a tiny random-init model trained by `rm train`
judges held-out solutions' first errors with ProcessBench's F1 >= 0.9 (eval.json's `steps` block)."""

import json

import pytest

from conftest import QUICKSTART
from rm.config import load_config
from rm.data.steps.step_problems import write_step_dataset
from rm.training.run import main

STEP_RUN = [
    "model.random_init.max_position_embeddings=512", "collator.max_length=512", "train.batch_size=16",
    "train.epochs=1", "train.eval_steps=0", "export.enabled=false", "data.cache=false",
]  # fmt: skip


@pytest.mark.slow
def test_a_tiny_model_finds_the_first_wrong_step(tmp_path):
    data = write_step_dataset(tmp_path / "data", n_train=600, n_test=100, seed=0, k=4)["train"].parent.parent
    run = tmp_path / "run"
    main(load_config(QUICKSTART, [*STEP_RUN, f"data.source={data}", f"output_dir={run}"]))
    steps = json.loads((run / "eval.json").read_text())["steps"]["overall"]
    print({k: steps[k] for k in ("step_accuracy", "step_auc", "first_error", "n_steps", "n_solutions")})
    assert steps["n_solutions"] == 400 and steps["first_error"]["n_erroneous"] == 200
    assert steps["first_error"]["f1"] >= 0.9
    assert steps["best_of_n"]["min"]["accuracy"] >= steps["best_of_n"]["min"]["chance"]
