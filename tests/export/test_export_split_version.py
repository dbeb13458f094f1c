"""An export names the hold-out its run drew: `rm eval --holdout` reads data.split_version from rm_config.yaml."""

from rm.export.restore import resolve_source


def test_a_run_saved_before_split_versions_exports_version_1(tmp_path):
    """A run directory whose config.yaml has no data.split_version held out by record (1): its export must say 1,
    not today's default (3), or `rm eval --holdout` of the export scores other pairs than the run held out."""
    for name, data, want in (("old", "data:\n  eval_split: ''\n", 1), ("new", "data:\n  split_version: 2\n", 2)):
        run = tmp_path / name
        (run / "export").mkdir(parents=True)
        (run / "config.yaml").write_text(data)
        (run / "export" / "model.safetensors").write_bytes(b"")  # resolve_source only finds the weights
        assert resolve_source(run).cfg.data.split_version == want
