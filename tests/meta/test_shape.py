"""The package's shape: small modules, small folders, no module name used twice (so a traceback or an import
names one file), and comments that make sense to a reader of the code alone."""

import re
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


URL = re.compile(r"\w+://\S+")
OWN_ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
"""`issue 26`, `Issues 19 and 26`, `issue #3`: this project's tracker, which a reader of the code does not have.
Another project's issue stays citable as `owner/repo#N` or a URL (`pytorch/pytorch#56297`)."""


def own_issue_mentions(text: str) -> list[tuple[int, str]]:
    """(line, match) for each mention of an issue by bare number, URLs left out."""
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        hits += [(number, m.group()) for m in OWN_ISSUE.finditer(URL.sub("", line))]
    return hits


def test_own_issue_mentions_are_found_and_references_are_not():
    text = "x  # why (issue 26)\n(Issues 19 and\n26) issue #3\npytorch/pytorch#56297 https://github.com/a/b/issues/7\n"
    assert own_issue_mentions(text) == [(1, "issue 26"), (2, "Issues 19"), (3, "issue #3")]


def test_no_module_cites_this_projects_issues_by_number():
    """A comment says why in its own words and numbers: "(issue 30)" means nothing without the tracker."""
    hits = [
        f"rm/{p.relative_to(RM)}:{n}: {m}"
        for p in sorted(RM.rglob("*.py"))
        for n, m in own_issue_mentions(p.read_text())
    ]
    assert hits == []
