"""The reward-only export: `export.reward_only` and `rm export --reward-only` write a one-output model whose
logits are column 0 of the full export's, read by plain transformers; the full export states the Gaussian loss's
learned sigma per attribute (`attribute_sigma`), and each card says which outputs its export has."""

import json
import math

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from conftest import QUICKSTART, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config
from rm.export.folder import export_run
from rm.training.run import main

TEXTS = ["\n\nHuman: q1: what is 2 + 3?\n\nAssistant: 5 indeed", "\n\nHuman: q2: what is 1 + 1?\n\nAssistant: 3"]


def write_rows(path, n_prompts=24):
    with open(path, "w") as f:
        for i in range(n_prompts):
            a, b = i % 9 + 1, (i * 7) % 9 + 1
            for right in (True, False):
                text = f"{a + b if right else a + b + 2} " + "indeed " * (i % 5)
                row = {"prompt": f"q{i}: what is {a} + {b}?", "response": text, "helpfulness": 4 if right else 1}
                f.write(json.dumps(row | {"correctness": 4 if right else 0, "verbosity": i % 5}) + "\n")
    return path


@pytest.fixture(scope="module")
def reward_only_run(tmp_path_factory):
    """A run with two Gaussian attribute outputs, exported reward-only at its end; a checkpoint of its last step."""
    root = tmp_path_factory.mktemp("reward_only")
    args = [
        f"data.source={write_rows(root / 'rows.jsonl')}", "data.eval_split=", "data.eval_fraction=0.2",
        "data.cache=false", *TINY_MODEL, "collator.max_length=64", "train.batch_size=8", "train.max_steps=3",
        "train.save_steps=3", "train.lr=3e-3", "train.report_to=[]", "train.num_threads=1",
        f"output_dir={root / 'run'}",
        "model.head.attributes=[correctness, verbosity]", "loss.attribute_loss=gaussian", "export.reward_only=true",
    ]  # fmt: skip
    main(load_config(QUICKSTART, args))
    return root / "run"


def logits(folder) -> tuple[torch.Tensor, dict]:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        out = model(**tokenizer(TEXTS, return_tensors="pt", padding=True)).logits
    return out, json.loads((folder / "config.json").read_text())


def test_reward_only_logits_are_column_zero_of_the_full_export(reward_only_run, tmp_path):
    full = export_run(reward_only_run / "checkpoints" / "step-3", tmp_path / "full", reward_only=False)
    assert cli(["export", str(reward_only_run / "checkpoints" / "step-3"), "--out", str(tmp_path / "one"),
                "--reward-only"]) == 0  # fmt: skip
    full_logits, full_config = logits(full)
    for folder in (tmp_path / "one", reward_only_run / "export"):  # the CLI flag, and export.reward_only
        one_logits, config = logits(folder)
        assert one_logits.shape == (2, 1) and full_logits.shape == (2, 3)
        torch.testing.assert_close(one_logits[:, 0], full_logits[:, 0], rtol=0, atol=1e-6)
        assert config.get("num_labels", 1) == 1 and config["id2label"] == {"0": "reward"}
        assert "attribute_scales" not in config and "attribute_sigma" not in config
        card = (folder / "README.md").read_text()
        assert "One output, `reward`" in card and "reward-only export of a model trained with attribute" in card
        assert "correctness, verbosity" in card
    assert full_config["id2label"] == {"0": "reward", "1": "correctness", "2": "verbosity"}
    card = (full / "README.md").read_text()
    assert 'top_k=None, function_to_apply="none"' in card and "default pipeline returns only the top label" in card


def test_the_full_export_states_the_learned_sigmas(reward_only_run, tmp_path):
    full = export_run(reward_only_run / "checkpoints" / "step-3", tmp_path / "full", reward_only=False)
    config = json.loads((full / "config.json").read_text())
    with safe_open(str(reward_only_run / "checkpoints" / "step-3" / "model.safetensors"), framework="pt") as f:
        key = next(k for k in f.keys() if k.endswith("attribute_log_scale"))
        log_scale = f.get_tensor(key).tolist()
    want = {"correctness": math.exp(log_scale[0]), "verbosity": math.exp(log_scale[1])}
    assert config["attribute_sigma"] == pytest.approx(want, abs=1e-6)
    assert any(abs(v - 1.0) > 1e-4 for v in want.values())  # trained away from the starting sigma of 1
    card = (full / "README.md").read_text()
    assert f"learned noise sigma {want['correctness']:.4g}" in card


def test_a_run_whose_export_is_reward_only_exports_again(reward_only_run, tmp_path):
    """`rm export RUN` reads the run's end-of-run export, one output: rebuilt as such, not refused."""
    again = export_run(reward_only_run, tmp_path / "again")
    again_logits, config = logits(again)
    run_logits, _ = logits(reward_only_run / "export")
    torch.testing.assert_close(again_logits, run_logits, rtol=0, atol=1e-6)
    assert config["id2label"] == {"0": "reward"}
