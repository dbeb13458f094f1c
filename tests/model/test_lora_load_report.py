"""A run from a local causal LM (LoRA on): transformers' LOAD REPORT lists the reward head as missing and the LM
head as unused on every such run, which rm expects, so it is not shown; a key it does not expect still is, in a
warning of rm's own. rm's own call into peft raises no FutureWarning."""

import logging
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig

from conftest import QUICKSTART, SHORT
from rm.cli import main as cli
from rm.config import ModelConfig, load_config
from rm.model.build import build_model
from rm.model.pretrained import fresh_head_load
from rm.training.run import main


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def transformers_log():
    """What transformers logs at its default verbosity, warnings (its loggers do not propagate to the root, where
    caplog listens)."""
    seen = Records()
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addHandler(seen)
    yield seen.messages
    logger.removeHandler(seen)
    logger.setLevel(level)


def local_lm(folder, tokenizer, extra: str = ""):
    """A causal LM saved as one downloaded from the Hub would be, with its tokenizer; `extra`: one more tensor in its
    checkpoint, a key no reward model has."""
    torch.manual_seed(0)
    shape = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64)
    lm = AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=256, **shape))
    lm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if extra:
        weights = load_file(folder / "model.safetensors")
        save_file(weights | {extra: torch.zeros(3)}, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_a_lora_run_and_its_export_from_a_local_model_show_no_load_report_and_no_future_warning(
    tmp_path, tokenizer, transformers_log, caplog
):
    model = local_lm(tmp_path / "lm", tokenizer)
    overrides = [*SHORT, f"model.name_or_path={model}", "model.lora.r=4", "export.enabled=false"]
    cfg = load_config(QUICKSTART, [*overrides, "collator.max_length=64", f"output_dir={tmp_path / 'run'}"])
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING, logger="rm"):
        warnings.simplefilter("always")
        main(cfg)
        assert cli(["export", str(tmp_path / "run"), "--out", str(tmp_path / "export")]) == 0  # rebuilt, then merged
    assert [m for m in transformers_log if "LOAD REPORT" in m] == []
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []
    assert "score.weight" not in caplog.text and "lm_head" not in caplog.text  # expected: nothing said of them


def test_a_key_rm_does_not_expect_is_still_said(tmp_path, tokenizer, transformers_log, caplog):
    model = local_lm(tmp_path / "lm", tokenizer, extra="model.extra_proj.weight")
    with caplog.at_level(logging.WARNING, logger="rm"), fresh_head_load(str(model)):
        build_model(ModelConfig(name_or_path=str(model)), len(tokenizer), tokenizer.pad_token_id, None)
    assert [m for m in transformers_log if "LOAD REPORT" in m] == []
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == f"{model}: weights in the checkpoint, not used: model.extra_proj.weight"


def test_outside_a_fresh_head_load_transformers_report_is_left_alone(tmp_path, tokenizer, transformers_log):
    """Loading a model rm does not add a head to (`rm score` of a reward model) keeps transformers' report."""
    model = local_lm(tmp_path / "lm", tokenizer)
    build_model(ModelConfig(name_or_path=str(model)), len(tokenizer), tokenizer.pad_token_id, None)
    assert any("LOAD REPORT" in m and "score.weight" in m for m in transformers_log)
