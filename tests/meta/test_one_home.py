"""One home per file name: the export folder's run config is named by rm/config/exportdir.py alone, so that it
cannot be renamed in one module and still be looked for under its old name in another (it was read by hand at
nine sites in five modules)."""

import ast
from pathlib import Path

RM = Path(__file__).resolve().parents[2] / "rm"


def modules_naming(literal: str) -> list[str]:
    return sorted(str(p.relative_to(RM)) for p in RM.rglob("*.py") if literal in p.read_text())


def test_the_exports_run_config_is_named_in_one_module():
    """Docstrings and the model card refer to it by `exportdir.RUN_CONFIG` or in prose."""
    assert modules_naming("rm_config.yaml") == ["config/exportdir.py"]


def classes_holding_token_ids() -> list[str]:
    """Classes (dataclasses or NamedTuples) with both a `prompt_ids` and a `response_ids` field annotated."""
    found = []
    for path in RM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {
                    s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
                if {"prompt_ids", "response_ids"} <= names:
                    found.append(f"{path.relative_to(RM)}:{node.name}")
    return sorted(found)


def test_one_encoded_unit():
    """Training, eval, scoring and the server hold token ids in one class: a text scored is a group of one, so a
    fitted text cannot differ between a path that scores groups and one that scores texts (rm score, the suites
    and rm serve each had a class of their own)."""
    # truncation.Truncated is the fitting rule's answer for one group (its prompt None where the group is dropped),
    # which its callers turn into an EncodedGroup at once.
    assert classes_holding_token_ids() == ["tokens/store.py:EncodedGroup", "tokens/truncation.py:Truncated"]
