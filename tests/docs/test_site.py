"""The documentation site builds with `mkdocs build --strict`: a broken link between pages, a missing anchor, a
page left out of mkdocs.yml's nav or any other warning fails it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.mark.slow
@pytest.mark.skipif(not MKDOCS.is_file(), reason="mkdocs-material is in the dev extra: pip install -e '.[dev]'")
def test_the_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    built = {p.relative_to(tmp_path / "site").parts[0] for p in (tmp_path / "site").glob("*/index.html")}
    pages = {p.stem for p in (REPO / "docs").glob("*.md")} - {"index"}
    assert pages <= built  # every page is in the site


def test_every_page_is_in_the_nav():
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    listed = sorted(page for entry in nav for page in entry.values())
    assert listed == sorted(p.name for p in (REPO / "docs").glob("*.md"))
