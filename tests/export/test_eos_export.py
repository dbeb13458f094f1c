"""data.eos travels with the export: config.json's `rm_eos` and the run config's data.eos are written, read back
by the one loader (rm/scoring/inference.py) for an export and for a run rebuilt from its checkpoint; an export
without a record is none; the card says which convention and how TRL and OpenRLHF should feed it."""

import json
from dataclasses import replace

import pytest
import yaml

from conftest import stopped_run, tiny_model
from rm.config import RunConfig
from rm.data.formats.text_rule import response_end
from rm.errors import ConfigError
from rm.export.folder import Weights, export_model
from rm.scoring.inference import load


def exported(tokenizer, path, eos: str):
    cfg = RunConfig()
    cfg = replace(cfg, data=replace(cfg.data, eos=eos))
    return export_model(tiny_model(tokenizer), tokenizer, path / eos, cfg, Weights(None, None))


@pytest.mark.parametrize("eos", ["eos", "space_eos"])
def test_the_convention_is_recorded_and_read_back(tokenizer, tmp_path, eos):
    folder = exported(tokenizer, tmp_path, eos)
    assert json.loads((folder / "config.json").read_text())["rm_eos"] == eos
    assert yaml.safe_load((folder / "rm_config.yaml").read_text())["data"]["eos"] == eos
    assert load(str(folder), device="cpu").eos == eos
    card = (folder / "README.md").read_text()
    assert "## End of sequence" in card and f"`data.eos: {eos}`" in card and "RewardTrainer" in card
    # The usage snippet ends its illustration's responses and the chat template's text as training ended them.
    end = json.dumps(response_end("", eos, tokenizer.eos_token))
    assert f'{end[1:-1]}"]  # each response ended as in training' in card
    assert f"apply_chat_template(messages, tokenize=False) + {end}))" in card


def test_none_writes_no_key_and_an_export_without_a_record_is_none(tokenizer, tmp_path):
    folder = exported(tokenizer, tmp_path, "none")
    assert "rm_eos" not in json.loads((folder / "config.json").read_text())
    assert load(str(folder), device="cpu").eos == "none"
    card = (folder / "README.md").read_text()
    assert "`data.eos: none`" in card and "apply_chat_template(messages, tokenize=False)))" in card
    assert "ended as in training" not in card
    old = exported(tokenizer, tmp_path / "old", "eos")
    config = json.loads((old / "config.json").read_text())
    del config["rm_eos"]
    (old / "config.json").write_text(json.dumps(config))
    assert load(str(old), device="cpu").eos == "none"  # config.json is the record scorers read


def test_a_bad_record_is_one_line_naming_the_key(tokenizer, tmp_path):
    folder = exported(tokenizer, tmp_path, "eos")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"rm_eos": "EOS"}))
    with pytest.raises(ConfigError, match="rm_eos") as e:
        load(str(folder), device="cpu")
    assert "\n" not in str(e.value)


def test_a_run_rebuilt_from_its_checkpoint_reads_its_config(tokenizer, tmp_path):
    run = stopped_run(tokenizer, tmp_path / "run")
    config = yaml.safe_load((run / "config.yaml").read_text())
    del config["data"]["eos"]  # a config.yaml saved before the key existed: none
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    assert load(str(run), device="cpu").eos == "none"
    config["data"]["eos"] = "space_eos"
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    assert load(str(run), device="cpu").eos == "space_eos"
