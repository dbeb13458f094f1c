"""MODEL may be an export, a run directory (its export), or a run that has no export yet (its newest checkpoint,
rebuilt as `rm export` rebuilds it): the same weights give the same rewards every way."""

import shutil
from dataclasses import replace

import pytest
import torch
from safetensors.torch import save_file
from serving import client, scorer_for

from conftest import tiny_model
from rm.config import ModelConfig, RandomInitConfig, RunConfig
from rm.config.rundir import write_config
from rm.data.data_report import shown_path
from rm.model.reward import RewardModel

TEXTS = ["\n\nHuman: Say hi.\n\nAssistant: Hi!", "\n\nHuman: Count.\n\nAssistant: 1 2 3"]


def rewards(model: str) -> list[float]:
    with client(scorer_for(model)) as c:
        got = c.post("/score", json={"texts": TEXTS})
    assert got.status_code == 200, got.text
    return got.json()["rewards"]


@pytest.fixture(scope="module")
def run_config():
    """The config `tiny_model` builds from, as a run would have saved it (max_length 64)."""
    shape = RandomInitConfig(
        model_type="llama", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    cfg = RunConfig(model=ModelConfig(random_init=shape))
    return replace(cfg, collator=replace(cfg.collator, max_length=64))


def test_a_run_directory_serves_its_export(exported_tiny, run_config, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_config(run_config, run / "config.yaml")
    shutil.copytree(exported_tiny, run / "export")
    assert rewards(str(run)) == pytest.approx(rewards(str(exported_tiny)), abs=1e-6)


def test_a_run_without_an_export_serves_its_newest_checkpoint(exported_tiny, tokenizer, run_config, tmp_path):
    """Checkpoints hold the RewardModel wrapper's state (`hf.` names); the run's own tokenizer and config rebuild
    the model, and its collator.max_length is the default max_length."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step-2").mkdir(parents=True)
    write_config(run_config, run / "config.yaml")
    tokenizer.save_pretrained(run / "tokenizer")
    state = {k: v.contiguous() for k, v in RewardModel(tiny_model(tokenizer)).state_dict().items()}
    save_file(state, run / "checkpoints" / "step-2" / "model.safetensors")
    older = {k: torch.zeros_like(v) for k, v in state.items()}  # an older step must not be the one served
    (run / "checkpoints" / "step-1").mkdir()
    save_file(older, run / "checkpoints" / "step-1" / "model.safetensors")
    scorer = scorer_for(str(run))
    assert scorer.max_length == 64 and scorer.layout_name == "shared"
    assert rewards(str(run)) == pytest.approx(rewards(str(exported_tiny)), abs=1e-5)


@pytest.mark.slow
def test_rm_eval_of_a_run_directory_is_rm_eval_of_its_export(exported_tiny, synthetic_root, run_config, tmp_path):
    """`rm eval` loads through the same loader: a run directory is its export/, with the same numbers."""
    import json

    from rm.cli import main as cli

    run = tmp_path / "run"
    run.mkdir()
    write_config(run_config, run / "config.yaml")
    shutil.copytree(exported_tiny, run / "export")
    results = []
    for name, model in (("run", run), ("export", run / "export")):
        argv = ["eval", "--model", str(model), "--data", str(synthetic_root), "--out", str(tmp_path / name)]
        assert cli([*argv, "--bootstrap-samples", "20"]) == 0
        results.append(json.loads((tmp_path / name / "eval.json").read_text()))
    assert results[0]["overall"] == results[1]["overall"]  # the same folder loaded: the same numbers, exactly
    assert results[0]["eval"]["model"] == shown_path(str(run / "export"))  # no path of this machine
