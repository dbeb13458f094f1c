"""The grouped benchmark's data (scripts/make_group_data.py): groups read back through rm's Nectar parser are the
real pairs plus two answers from other prompts, the binarized file holds the same 6 ordered pairs per group, and
no held-out prompt is trained on."""

import gzip
import json
import sys

import pytest

from conftest import HH_HARMLESS_TEST, REPO
from rm.data.data_report import DataReport
from rm.data.formats.hh import split_pair
from rm.data.formats.pair import ParseContext
from rm.data.formats.ranked import parse_nectar

sys.path.insert(0, str(REPO / "scripts"))
import make_group_data  # noqa: E402


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_groups_pairs_and_heldout_agree_with_the_source(tmp_path):
    counts = make_group_data.write(tmp_path, limit=60, eval_fraction=0.25)
    with gzip.open(HH_HARMLESS_TEST, "rt", encoding="utf-8") as f:
        source = [json.loads(line) for line in f if line.strip()][:60]
    groups = [json.loads(line) for line in (tmp_path / "groups" / "train.jsonl").read_text().splitlines()]
    pairs = [json.loads(line) for line in (tmp_path / "pairs" / "train.jsonl").read_text().splitlines()]
    heldout = [json.loads(line) for line in (tmp_path / "heldout" / "test.jsonl").read_text().splitlines()]
    assert counts == {"groups": len(groups), "pairs": len(pairs), "heldout": len(heldout)}
    assert len(groups) >= 40 and len(pairs) == 6 * len(groups) and heldout == source[45:]
    train_prompts = {split_pair(r["chosen"], r["rejected"])[0] for r in source[:45]}
    heldout_prompts = {split_pair(r["chosen"], r["rejected"])[0] for r in heldout}
    originals = {(p, c, r) for p, c, r in (split_pair(s["chosen"], s["rejected"]) for s in source[:45])}
    for k, record in enumerate(groups):
        group = parse_nectar(record, f"groups:{k + 1}", ParseContext(DataReport(), subset="harmless-base"))
        assert group.rank == (0, 1, 2, 3)
        assert (group.prompt, *group.responses[:2]) in originals  # the real pair, word for word
        assert group.prompt in train_prompts and group.prompt not in heldout_prompts
        others = {r for p, c, rr in originals if p != group.prompt for r in (c, rr)}
        assert set(group.responses[2:]) <= others  # answers to other prompts
        binarized = pairs[6 * k : 6 * k + 6]
        want = [(a, b) for a in range(4) for b in range(a + 1, 4)]
        for pair, (a, b) in zip(binarized, want, strict=True):
            want_text = (group.prompt, group.responses[a], group.responses[b])
            assert split_pair(pair["chosen"], pair["rejected"]) == want_text


def test_the_source_is_a_parameter_and_an_option(tmp_path, monkeypatch, capsys):
    """No module global to patch: `write(..., source=)` and `--source` read the file named (gzipped or not).
    5 pairs, the last 20% (1) held out: 4 train groups of 24 pairs."""
    records = [
        {"chosen": f"\n\nHuman: q{i}?\n\nAssistant: yes {i}", "rejected": f"\n\nHuman: q{i}?\n\nAssistant: no {i}"}
        for i in range(5)
    ]
    plain = tmp_path / "hh.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in records))
    packed = tmp_path / "hh.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write(plain.read_text())
    assert make_group_data.write(tmp_path / "a", source=plain) == {"groups": 4, "pairs": 24, "heldout": 1}
    monkeypatch.setattr(sys, "argv", ["make_group_data.py", str(tmp_path / "b"), "--source", str(packed)])
    make_group_data.main()
    assert "4 train groups of 4 (24 pairs), 1 held-out" in capsys.readouterr().out
    for name in ("groups/train.jsonl", "pairs/train.jsonl", "heldout/test.jsonl"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    assert json.loads((tmp_path / "a" / "heldout" / "test.jsonl").read_text()) == records[4]
