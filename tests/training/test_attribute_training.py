"""Attribute heads end to end: a run on HelpSteer2-style rows trains and exports a 1 + A output
classifier that plain transformers loads (logits[:, 0] the reward rm computes, logits[:, 1:] the attributes,
named in id2label, their scales in config.json); and a run without attributes is bit for bit the run that the
old loop (`group_rewards` + `preference_loss` directly) trains."""

import json
import random

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from conftest import QUICKSTART, TINY_MODEL
from rm.collate.padded import PaddedCollator
from rm.config import load_config
from rm.model import objective, reward
from rm.model.reward import RewardModel, group_outputs
from rm.tokens.store import EncodedGroup
from rm.training import loop
from rm.training.run import main


def write_rows(path, n_prompts=60, seed=0):
    """HelpSteer2's columns; verbosity = the response's length bucket, correctness = whether a sum is right."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n_prompts):
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            for k, right in enumerate((True, False)):
                answer = a + b if right else a + b + rng.randint(1, 3)
                words = rng.randint(1, 12)
                text = f"{answer} " + " ".join(["indeed"] * words) + f" {k}"
                row = {"prompt": f"q{i}: what is {a} + {b}?", "response": text, "helpfulness": 4 if right else 1}
                row |= {"correctness": 4 if right else 0, "coherence": 3, "complexity": 1, "verbosity": words // 3}
                f.write(json.dumps(row) + "\n")
    return path


def run_args(data, out, *extra):
    return [
        f"data.source={data}", "data.eval_split=", "data.eval_fraction=0.2", "data.cache=false", *TINY_MODEL,
        "collator.max_length=64", "train.batch_size=8", "train.eval_batch_size=16", "train.max_steps=8",
        "train.lr=3e-3", "train.report_to=[]", "train.num_threads=1", f"output_dir={out}", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def attribute_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("attributes")
    data = write_rows(root / "rows.jsonl")
    extra = ["model.head.attributes=[correctness, verbosity]", "model.head.attribute_scales={correctness: [0, 4]}"]
    main(load_config(QUICKSTART, run_args(data, root / "run", *extra)))
    return root / "run"


def test_the_export_names_its_outputs_and_states_their_scales(attribute_run):
    config = json.loads((attribute_run / "export" / "config.json").read_text())
    assert config.get("num_labels", 3) == 3  # transformers 5 writes only id2label, from which it is derived
    assert config["id2label"] == {"0": "reward", "1": "correctness", "2": "verbosity"}
    assert config["problem_type"] == "regression"
    report = json.loads((attribute_run / "data_report.json").read_text())["attributes"]
    assert config["attribute_scales"] == {"correctness": [0.0, 4.0], "verbosity": report["verbosity"]["scale"]}
    assert report["verbosity"]["declared"] is False and report["verbosity"]["scale"] == [0.0, 4.0]
    card = (attribute_run / "export" / "README.md").read_text()
    assert "with 3 outputs, the scalar reward (index 0) and 2 ratings" in card
    assert "| 1 | `correctness` |" in card and "| 2 | `verbosity` |" in card and 'function_to_apply="none"' in card


def test_plain_transformers_logits_are_rms_reward_and_attributes(attribute_run):
    export = attribute_run / "export"
    tokenizer = AutoTokenizer.from_pretrained(export)
    model = AutoModelForSequenceClassification.from_pretrained(export).eval()
    texts = ["\n\nHuman: q1: what is 2 + 3?\n\nAssistant: 5 indeed", "\n\nHuman: q2: what is 1 + 1?\n\nAssistant: 3"]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits  # [2, 3]
        ids = [tokenizer(t)["input_ids"] for t in texts]
        groups = [EncodedGroup([], [ids[0], ids[1]], [0, 1], 0)]
        ours = group_outputs(RewardModel(model), PaddedCollator(tokenizer.pad_token_id)(groups))
    assert logits.shape == ours.shape == (2, 3)
    torch.testing.assert_close(logits, ours, rtol=0, atol=1e-4)


def test_without_attributes_a_run_is_bit_identical_to_the_old_loss(tmp_path, monkeypatch):
    data = write_rows(tmp_path / "rows.jsonl", n_prompts=30)
    main(load_config(QUICKSTART, run_args(data, tmp_path / "new", "train.max_steps=4")))
    # The loop as it was before attributes (and the length head, off here, whose arguments it ignores).
    monkeypatch.setattr(loop, "group_outputs", lambda model, batch, length=False: reward.group_rewards(model, batch))
    monkeypatch.setattr(
        loop, "training_loss", lambda cfg, r, batch, nu, _, length=None: objective.preference_loss(cfg, r, batch, nu)
    )
    main(load_config(QUICKSTART, run_args(data, tmp_path / "old", "train.max_steps=4")))
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "new" / "export" / name).read_bytes() == (tmp_path / "old" / "export" / name).read_bytes()
    new, old = (json.loads((tmp_path / d / "eval.json").read_text()) for d in ("new", "old"))
    assert new["overall"] == old["overall"]


def test_a_gaussian_runs_checkpoint_exports_as_its_end_of_run_export(tmp_path):
    """The learned log-scales live in the checkpoint beside the weights; exporting the checkpoint leaves them out
    and writes the weights and config.json the end of the run wrote."""
    from rm.export.folder import export_run

    data = write_rows(tmp_path / "rows.jsonl", n_prompts=30)
    extra = ["model.head.attributes=[correctness]", "loss.attribute_loss=gaussian", "train.max_steps=3"]
    main(load_config(QUICKSTART, run_args(data, tmp_path / "run", *extra, "train.save_steps=3")))
    again = export_run(tmp_path / "run" / "checkpoints" / "step-3", tmp_path / "again")
    for name in ("model.safetensors", "config.json"):
        assert (again / name).read_bytes() == (tmp_path / "run" / "export" / name).read_bytes(), name
