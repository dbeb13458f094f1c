"""docs/configuration.md is generated from the run config's dataclasses (scripts/gen_config_docs.py): the committed
page must be what the script writes now, so a field added, renamed or re-documented without regenerating the page
fails here, and every key must carry the docstring the page is made of."""

import dataclasses
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import gen_config_docs  # noqa: E402


def test_the_committed_page_is_the_generated_one():
    assert gen_config_docs.PAGE.read_text() == gen_config_docs.page(), "run python scripts/gen_config_docs.py"


def test_every_key_of_the_run_config_has_a_docstring():
    assert gen_config_docs.undocumented() == []


def test_every_dotted_key_is_on_the_page_with_its_default():
    from rm.config import RunConfig

    page = gen_config_docs.PAGE.read_text()
    cfg = RunConfig()
    for key in ("train.lr", "collator.max_length", "model.lora.r", "data.argilla.pairs_from_edits", "loss.ties"):
        value = cfg
        for part in key.split("."):
            value = getattr(value, part)
        assert f"| `{key}` |" in page and f"| `{gen_config_docs.show(value)}` |" in page, key
    assert "| `train.eval_suites[].suite` |" in page  # the fields of a list of sections too


@dataclasses.dataclass
class _Undocumented:
    """A section with one key documented and one not."""

    said: int = 1
    """What it is."""
    unsaid: str = ""


def test_a_key_without_a_docstring_is_reported():
    assert gen_config_docs.undocumented(_Undocumented) == ["unsaid"]


def test_check_fails_on_a_stale_page(tmp_path, monkeypatch):
    script = [sys.executable, str(REPO / "scripts" / "gen_config_docs.py"), "--check"]
    assert subprocess.run(script, capture_output=True).returncode == 0
    stale = tmp_path / "configuration.md"
    stale.write_text(gen_config_docs.page().replace("Peak learning rate", "Learning rate"))
    monkeypatch.setattr(gen_config_docs, "PAGE", stale)
    assert gen_config_docs.main(["--check"]) == 1
    assert gen_config_docs.main([]) == 0 and stale.read_text() == gen_config_docs.page()
