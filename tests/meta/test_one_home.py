"""One home per file name: the export folder's run config is named by rm/config/exportdir.py alone, so that it
cannot be renamed in one module and still be looked for under its old name in another (it was read by hand at
nine sites in five modules)."""

from pathlib import Path

RM = Path(__file__).resolve().parents[2] / "rm"


def modules_naming(literal: str) -> list[str]:
    return sorted(str(p.relative_to(RM)) for p in RM.rglob("*.py") if literal in p.read_text())


def test_the_exports_run_config_is_named_in_one_module():
    """Docstrings and the model card refer to it by `exportdir.RUN_CONFIG` or in prose."""
    assert modules_naming("rm_config.yaml") == ["config/exportdir.py"]
