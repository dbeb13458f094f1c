"""ExportDir: the one reader of the run config an export keeps, against folders written by hand."""

from pathlib import Path

import pytest
import yaml

from rm.config import RunConfig, to_dict
from rm.config.exportdir import RUN_CONFIG, ExportDir
from rm.config.rundir import saved_config
from rm.errors import ConfigError


def export_with(folder: Path, saved: dict | None) -> ExportDir:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    if saved is not None:
        (folder / RUN_CONFIG).write_text(yaml.safe_dump(saved))
    return ExportDir(folder)


def test_a_model_folder_of_ones_own_says_nothing_of_a_run(tmp_path):
    folder = export_with(tmp_path / "plain", None)
    assert folder.holds_model and not folder.from_rm
    assert folder.saved() == {} and folder.max_length() is None and folder.soft_loss() is None
    assert folder.split_version(default=2) == 2 and folder.training_data() == ({}, "")
    assert not ExportDir(tmp_path / "absent").holds_model


def test_an_rm_export_reads_back_its_run(tmp_path):
    cfg = to_dict(saved_config(RunConfig(output_dir=str(tmp_path / "run"))))
    cfg["collator"]["max_length"] = 96
    cfg["loss"] |= {"strength": "soft", "strength_map": "linear", "strength_max": 3}
    folder = export_with(tmp_path / "export", cfg)
    assert folder.from_rm and folder.load().collator.max_length == 96 and folder.max_length() == 96
    assert folder.soft_loss().strength_max == 3
    assert folder.split_version(default=1) == cfg["data"]["split_version"]
    data, where = folder.training_data()  # synthetic data lies in the run directory's data/
    assert data["source"] == "synthetic" and where == str(tmp_path / "run" / "data")


def test_keys_an_older_rm_wrote_are_read_raw(tmp_path):
    """A saved config today's schema refuses still gives the keys a caller reads; its split rule is 1 (by
    record), as runs saved before data.split_version held out."""
    folder = export_with(tmp_path / "old", {"collator": {"max_length": 64, "retired_key": 1}, "data": {}})
    assert folder.max_length() == 64 and folder.split_version(default=2) == 1
    with pytest.raises(ConfigError, match="retired_key"):
        folder.load()


def test_export_file_names(tmp_path):
    folder = export_with(tmp_path / "export", {})
    (tmp_path / "export" / "notes.txt").write_text("mine")
    assert folder.is_export_file(folder.run_config) and folder.is_export_file(folder.model_config)
    assert not folder.is_export_file(tmp_path / "export" / "notes.txt")


def test_max_length_of_a_saved_config_without_a_collator_section_is_the_default(tmp_path):
    """A saved rm_config.yaml may leave out sections (the loader fills in defaults): no KeyError, the default; a
    value that is not an integer is one ConfigError naming the file."""
    from rm.config import RunConfig
    from rm.config.exportdir import RUN_CONFIG, ExportDir
    from rm.errors import ConfigError

    (tmp_path / RUN_CONFIG).write_text("train:\n  lr: 0.001\n")
    assert ExportDir(tmp_path).max_length() == RunConfig().collator.max_length
    (tmp_path / RUN_CONFIG).write_text("collator:\n  max_length: long\n")
    with pytest.raises(ConfigError, match=f"{RUN_CONFIG}: collator.max_length must be an integer, got 'long'"):
        ExportDir(tmp_path).max_length()
