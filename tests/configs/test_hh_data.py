"""The real HH-RLHF data without a fixed folder: where the tests look for it ($RM_HH_DATA, then the clone's
data/hh-rlhf, then ../shared beside the clone), what `make data` writes (the Hub repository's layout, which rm reads
as the original) and says without a network, and the one summary line of a test session that skipped for want of
it."""

import gzip
import json
import os
import subprocess
import sys

import get_hh_data  # scripts/, on the path tests/conftest.py gives
import pytest

from conftest import REPO
from rm.data.load import load_pairs

PAIRS = [
    {"chosen": "\n\nHuman: Is a kettle safe?\n\nAssistant: Yes, with water in it.", "rejected": "\n\nHuman: Is a "
     "kettle safe?\n\nAssistant: Never.", "extra": 1},
    {"chosen": "\n\nHuman: Name a colour.\n\nAssistant: Teal.", "rejected": "\n\nHuman: Name a colour.\n\nAssistant: "
     "Loud."},
]  # fmt: skip


def put(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(b"{}\n"))
    return path


def test_the_data_is_looked_for_by_variable_then_in_the_clone_then_beside_it(tmp_path):
    clone = tmp_path / "clone"
    shared = tmp_path / "shared" / "data" / "hh-rlhf"
    assert get_hh_data.hh_data_root({}, clone) == shared
    assert get_hh_data.hh_data_root({"RM_HH_DATA": ""}, clone) == shared  # set but empty: as unset
    put(clone / "data" / "hh-rlhf" / "harmless-base" / "test.jsonl.gz")
    assert get_hh_data.hh_data_root({}, clone) == clone / "data" / "hh-rlhf"
    # The variable wins, even where it names nothing: a wrong path should show as skips, not be replaced.
    assert get_hh_data.hh_data_root({"RM_HH_DATA": str(tmp_path / "nowhere")}, clone) == tmp_path / "nowhere"


def test_make_data_writes_the_hub_layout_that_rm_reads_and_prints_the_export_line(tmp_path, monkeypatch, capsys):
    asked = []

    def hub(subset, split):
        asked.append(f"{subset}/{split}")
        return iter(PAIRS)

    monkeypatch.setattr(get_hh_data, "unreachable", lambda: "")
    monkeypatch.setattr(get_hh_data, "hub_slice", hub)
    out = tmp_path / "hh"
    assert get_hh_data.main(["--out", str(out), "--slices", "harmless-base/test", "helpful-base/train"]) == 0
    assert asked == ["harmless-base/test", "helpful-base/train"]
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{out}/harmless-base/test.jsonl.gz: 2 pairs", f"{out}/helpful-base/train.jsonl.gz: 2 pairs",
                     f"export RM_HH_DATA={out}"]  # fmt: skip
    with gzip.open(out / "harmless-base" / "test.jsonl.gz", "rt") as f:
        assert [json.loads(line) for line in f] == [{k: p[k] for k in ("chosen", "rejected")} for p in PAIRS]
    pairs = load_pairs(str(out), "test", ["harmless-base"])
    assert [(p.subset, p.chosen) for p in pairs] == [("harmless-base", " Yes, with water in it."),
                                                     ("harmless-base", " Teal.")]  # fmt: skip
    assert get_hh_data.main(["--out", str(out)]) == 0 and len(asked) == 2  # written once
    assert capsys.readouterr().out.splitlines()[0] == f"{out}/harmless-base/test.jsonl.gz: already there"


def test_without_a_network_make_data_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    from rm.data import hub_reach

    monkeypatch.setattr(hub_reach, "_reached", {})  # the refusal seen here is not left for later tests of the worker
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert get_hh_data.main(["--out", str(tmp_path / "hh")]) == 1
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens, refused at once
    assert get_hh_data.main(["--out", str(tmp_path / "hh")]) == 1
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 2 and all("`make data` needs the network" in line for line in lines)
    assert "HF_HUB_OFFLINE" in lines[0] and "HF_HUB_OFFLINE" not in lines[1]
    assert not (tmp_path / "hh").exists()


def test_the_summary_line_counts_only_skips_for_the_hh_file_and_only_while_it_is_missing(tmp_path):
    reasons = ["Skipped: needs the shared HH file", "Skipped: shared HH-RLHF file not present", "Skipped: no GPU"]
    line = get_hh_data.missing_line(reasons, tmp_path / "test.jsonl.gz")
    assert line.startswith("2 tests skipped: real HH-RLHF data not found; run `make data` or set RM_HH_DATA=")
    assert get_hh_data.missing_line(reasons[:1], tmp_path / "x").startswith("1 test skipped:")
    assert get_hh_data.missing_line(reasons[2:], tmp_path / "x") == ""
    assert get_hh_data.missing_line(reasons, put(tmp_path / "test.jsonl.gz")) == ""


SESSION = """
import pytest
from conftest import HH_HARMLESS_TEST

@pytest.mark.skipif(not HH_HARMLESS_TEST.is_file(), reason="needs the shared HH file")
def test_one(): pass

@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_two(): pass

@pytest.mark.skip(reason="something else")
def test_three(): pass
"""


@pytest.mark.slow
def test_a_session_without_the_file_says_so_once_in_its_summary(tmp_path):
    """tests/conftest.py's hook in a pytest session of its own, RM_HH_DATA naming a folder without the file."""
    (tmp_path / "test_needs_hh.py").write_text(SESSION)
    env = {**os.environ, "RM_HH_DATA": str(tmp_path / "nowhere"), "PYTHONPATH": f"{REPO / 'tests'}{os.pathsep}{REPO}"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "-p", "conftest", "test_needs_hh.py"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "real HH-RLHF data not found" in line]
    assert said == [
        "2 tests skipped: real HH-RLHF data not found; run `make data` or set RM_HH_DATA=FOLDER "
        f"(FOLDER/harmless-base/test.jsonl.gz; looked for {tmp_path / 'nowhere' / 'harmless-base' / 'test.jsonl.gz'})"
    ]
