"""The package's shape: small modules, small folders, no module name used twice (so a traceback or an import
names one file), and comments that make sense to a reader of the code alone."""

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RM = ROOT / "rm"
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
    """(line, match) for each mention of an issue by bare number, URLs left out; a mention wrapped onto the next
    line ("(issue" then "25)") counts at the line where it starts. A URL holds no newline, so dropping it keeps
    every line number."""
    text = URL.sub("", text)
    return [(text.count("\n", 0, m.start()) + 1, m.group()) for m in OWN_ISSUE.finditer(text)]


def test_own_issue_mentions_are_found_and_references_are_not():
    text = "x  # why (issue 26)\n(Issues 19 and\n26) issue #3\npytorch/pytorch#56297 https://github.com/a/b/issues/7\n"
    assert own_issue_mentions(text) == [(1, "issue 26"), (2, "Issues 19"), (3, "issue #3")]
    assert own_issue_mentions("one\nbeside the pairs (issue\n25), so") == [(2, "issue\n25")]


def test_no_module_cites_this_projects_issues_by_number():
    """A comment says why in its own words and numbers: "(issue 30)" means nothing without the tracker."""
    hits = [
        f"rm/{p.relative_to(RM)}:{n}: {m}"
        for p in sorted(RM.rglob("*.py"))
        for n, m in own_issue_mentions(p.read_text())
    ]
    assert hits == []


def prose_files() -> list[Path]:
    """tests/ and scripts/ sources: their comments and docstrings are read like rm's. Fixture data is left out (it
    is what a user's files hold, not prose), and so is this file, whose examples above must match."""
    found = [
        p for folder in ("tests", "scripts") for p in sorted((ROOT / folder).rglob("*")) if p.suffix in {".py", ".sh"}
    ]
    return [p for p in found if "fixtures" not in p.relative_to(ROOT).parts and p != Path(__file__).resolve()]


def test_no_test_or_script_cites_this_projects_issues_by_number():
    """The same rule for tests and scripts: a test's docstring says what is checked and why, in its own numbers."""
    files = prose_files()
    assert any(p.name == "conftest.py" for p in files) and any(p.suffix == ".sh" for p in files), "nothing scanned"
    hits = [f"{p.relative_to(ROOT)}:{n}: {m!r}" for p in files for n, m in own_issue_mentions(p.read_text())]
    assert hits == []
