"""The data benchmarks' inputs and plumbing: the tagged scale set is the real file word for word but
for one unique tag a pair, and bench_data.py runs with a tokenizer loaded by path. Nothing here is timed."""

import gzip
import json
import sys

import pytest

from conftest import HH_HARMLESS_TEST, REPO
from rm.tokens.tokenizer import train_bpe

sys.path.insert(0, str(REPO / "scripts"))
import bench_data  # noqa: E402
import make_scale_data  # noqa: E402

needs_hh = pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")


def source_records():
    with gzip.open(HH_HARMLESS_TEST, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@needs_hh
def test_tagged_variant_is_the_real_pairs_with_one_unique_tag_each():
    base = source_records()
    records = make_scale_data.records(n_train=5, n_test=2, variant="tagged")
    assert list(records) == list(make_scale_data.SUBSETS) and all(len(r) == 7 for r in records.values())
    tags = []
    for s, rows in enumerate(records.values()):
        for i, row in enumerate(rows):
            tag = f"[#{s * 7 + i:06d}] "
            tags.append(tag)
            want = base[(i + s * 577) % len(base)]
            for side in ("chosen", "rejected"):
                at = row[side].index(make_scale_data.HUMAN) + len(make_scale_data.HUMAN)
                assert row[side][at:].startswith(tag)  # in the first human turn, at its start
                assert row[side].replace(tag, "", 1) == want[side]  # otherwise word for word, every turn kept
                assert row[side].count("\n\nHuman: ") == want[side].count("\n\nHuman: ")
            assert row["rejected"].startswith(row["chosen"][: row["chosen"].index("\n\nAssistant:")])
    assert len(set(tags)) == len(tags) == 28


@needs_hh
def test_written_directory_reads_as_hh(tmp_path):
    make_scale_data.write(tmp_path, 3, 1, variant="tagged")
    for subset in make_scale_data.SUBSETS:
        for split, n in (("train", 3), ("test", 1)):
            with gzip.open(tmp_path / subset / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
                rows = [json.loads(line) for line in f]
            assert len(rows) == n and all(set(r) == {"chosen", "rejected"} for r in rows)


def test_tokenizing_rate_is_read_from_the_progress_bars():
    """Both splits' bars: 1,000 + 200 pairs from the train bar's first drawing (t=10) to the eval bar's 100% (t=14)."""
    lines = [
        (9.0, 0.0, "data: something"),
        (10.0, 5.0, "tokenizing train:   0%|          | 0/1000 [00:00<?, ?pairs/s]"),
        (13.0, 11.0, "tokenizing train: 100%|██████████| 1000/1000 [00:03<00:00, 333.33pairs/s]"),
        (13.0, 11.0, "tokenizing eval:   0%|          | 0/200 [00:00<?, ?pairs/s]"),
        (14.0, 12.0, "tokenizing eval: 100%|██████████| 200/200 [00:01<00:00, 200.00pairs/s]"),
    ]
    assert bench_data.tokenizing(lines) == (1200 / 4.0, 7.0 / 4.0)
    assert bench_data.tokenizing(lines[:1]) is None  # a cached run tokenizes nothing


@needs_hh
@pytest.mark.slow
def test_bench_data_runs_with_a_tokenizer_loaded_by_path(tmp_path):
    data, saved = tmp_path / "data", tmp_path / "tokenizer"
    make_scale_data.write(data, 40, 10, variant="tagged")
    texts = [t for r in source_records()[:200] for t in (r["chosen"], r["rejected"])]
    train_bpe(texts, 500).save_pretrained(saved)
    args = bench_data.overrides(REPO, data, tmp_path / "run", saved)
    assert f"tokenizer.name_or_path={saved.resolve()}" in args and not any("vocab_size" in a for a in args)
    line, rss = bench_data.run(REPO, data, tmp_path / "run", [], saved)
    assert line.startswith("FIRST ") and " pairs/s (" in line and rss > 0


def test_the_source_is_a_parameter_and_an_option(tmp_path, monkeypatch):
    """No module global to patch: `records(..., source=)` and `--source` copy the pairs of the file named."""
    pair = {
        "chosen": "\n\nHuman: one two three\n\nAssistant: yes",
        "rejected": "\n\nHuman: one two three\n\nAssistant: no",
    }
    source = tmp_path / "hh.jsonl"
    source.write_text(json.dumps(pair) + "\n")
    records = make_scale_data.records(2, 1, variant="tagged", source=source)
    assert records["harmless-base"][0]["chosen"] == "\n\nHuman: [#000000] one two three\n\nAssistant: yes"
    assert all(len(rows) == 3 for rows in records.values())
    argv = ["make_scale_data.py", str(tmp_path / "out"), "--train", "2", "--test", "1", "--variant", "tagged"]
    monkeypatch.setattr(sys, "argv", [*argv, "--source", str(source)])
    make_scale_data.main()
    with gzip.open(tmp_path / "out" / "helpful-base" / "test.jsonl.gz", "rt", encoding="utf-8") as f:
        assert [json.loads(line) for line in f] == records["helpful-base"][2:]
