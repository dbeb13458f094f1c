"""The package's shape, as issue 24 set it: small modules, small folders, and no module name used twice (so a
traceback or an import names one file)."""

from collections import Counter
from pathlib import Path

RM = Path(__file__).resolve().parents[2] / "rm"
MAX_LINES = 300
MAX_MODULES = 12


def modules() -> list[Path]:
    return [p for p in sorted(RM.rglob("*.py")) if p.name != "__init__.py"]


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(RM)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_folder_holds_more_than_12_modules():
    per_folder = Counter(str(p.parent.relative_to(RM)) for p in modules())
    assert {folder: n for folder, n in per_folder.items() if n > MAX_MODULES} == {}


def test_no_module_name_is_used_twice():
    names = Counter(p.name for p in modules())
    assert sorted(name for name, n in names.items() if n > 1) == []
