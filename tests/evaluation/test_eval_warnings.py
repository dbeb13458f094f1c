"""What `rm eval` says, and only that: a warning when it scores the model's own training pairs (its export's
rm_config.yaml names the source and split), none about texts longer than model_max_length, which rm fits."""

import json
import logging
import shutil

import pytest
import yaml
from transformers.utils import logging as hf_logging

from rm.config import DataConfig
from rm.data.data_report import shown_path
from rm.evaluation.eval_report import EvalOptions, evaluate_model

OPTIONS = EvalOptions(batch_size=8, samples=50)


@pytest.fixture
def trained_on(exported_tiny, synthetic_root, tmp_path):
    """The tiny export, its rm_config.yaml saying it trained on one file with a 0.1 hold-out (as a user's run)."""
    data = tmp_path / "prefs.jsonl.gz"
    shutil.copy(synthetic_root / "harmless" / "train.jsonl.gz", data)
    export = tmp_path / "export"
    shutil.copytree(exported_tiny, export)
    cfg = yaml.safe_load((export / "rm_config.yaml").read_text())
    cfg["data"] |= {"source": str(data), "eval_split": "", "eval_fraction": 0.1, "split_seed": 0}
    (export / "rm_config.yaml").write_text(yaml.safe_dump(cfg))
    return export, data


@pytest.mark.slow
def test_scoring_the_training_file_is_said_and_its_held_out_share_is_not(trained_on, tmp_path, caplog):
    export, data = trained_on
    with caplog.at_level(logging.WARNING, logger="rm"):
        result = evaluate_model(str(export), DataConfig(source=str(data), eval_split="test"), tmp_path / "a", OPTIONS)
    assert f"is the data {export} was trained on" in caplog.text and "--holdout 0.1" in caplog.text
    assert result["eval"]["training_data"].startswith(shown_path(str(data)))  # eval.json is shared
    caplog.clear()
    held_out = DataConfig(source=str(data), eval_split="", eval_fraction=0.1)
    with caplog.at_level(logging.WARNING, logger="rm"):
        result = evaluate_model(str(export), held_out, tmp_path / "b", OPTIONS)
    assert "trained on" not in caplog.text and result["eval"]["training_data"] is None


@pytest.mark.slow
def test_no_warning_about_texts_longer_than_the_tokenizers_maximum(exported_tiny, tmp_path, caplog):
    """The export's model_max_length is 512; these prompts are longer, and rm cuts them at their turns."""
    long = " ".join(["word"] * 600)
    prompts = [f"\n\nHuman: {long} {i}?\n\nAssistant:" for i in range(3)]
    rows = [{"chosen": p + " yes", "rejected": p + " no"} for p in prompts]
    (tmp_path / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    hf_logging.enable_propagation()  # transformers' records reach caplog
    try:
        with caplog.at_level(logging.WARNING):
            result = evaluate_model(str(exported_tiny), DataConfig(source=str(tmp_path / "long.jsonl")), tmp_path / "e",
                                    OPTIONS)  # fmt: skip
    finally:
        hf_logging.disable_propagation()
    assert result["eval"]["prompts_truncated"] == 3
    assert "Token indices sequence length" not in caplog.text
