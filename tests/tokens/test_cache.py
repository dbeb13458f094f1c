"""The tokenized-data cache (rm/tokens/cache.py, rm/tokens/prepare.py): a cached run gets exactly what an uncached
one gets, without reading the source; every input changes the key; a damaged entry is rebuilt, never read."""

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import astuple
from pathlib import Path

import pytest

from conftest import HH_HARMLESS_TEST, REPO
from rm.config import RunConfig, build
from rm.tokens import cache, prepare
from rm.tokens.prepare import data_key, prepare_data
from rm.tokens.tokenizer import train_bpe

pytestmark = pytest.mark.skipif(not HH_HARMLESS_TEST.is_file(), reason="needs the shared HH file")

# 300 pairs of the real HH file with its 4 empty answers skipped, at a max_length that truncates some
# prompts and drops some pairs: every part of the report has something in it.
DATA = {"on_bad_record": "skip", "eval_split": "", "eval_fraction": 0.2, "max_train_pairs": 240}
DATA |= {"max_eval_pairs": 60}


def config(tmp_path: Path, source: Path = HH_HARMLESS_TEST, **changes) -> RunConfig:
    cfg = build(RunConfig, {"output_dir": str(tmp_path / "run"), "data": {"source": str(source), **DATA}}, "test")
    cfg.data.cache_dir = str(tmp_path / "cache")
    cfg.collator.max_length = 96
    for key, value in changes.items():
        section, name = key.split("__")
        setattr(getattr(cfg, section), name, value)
    return cfg


def plain(value):
    """Ids as lists, at any depth (a group's responses are a list of id arrays)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return [plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def rows(split) -> list[tuple]:
    """Each group as plain Python values (ids as lists), so splits compare with ==."""
    return [tuple(plain(v) for v in astuple(p)) for p in split]


def report_files(data: prepare.Prepared, folder: Path) -> dict[str, str]:
    data.report.write(folder)
    return {name: (folder / name).read_text() for name in ("data_report.json", "skipped.jsonl")}


def entries(cfg: RunConfig, kind: str = "data") -> list[Path]:
    return sorted(Path(cfg.data.cache_dir).glob(f"{kind}-*"))


@pytest.mark.slow
def test_cached_equals_uncached_and_reads_no_source(tmp_path, tokenizer, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="rm")
    uncached = prepare_data(config(tmp_path, data__cache=False), tokenizer)
    assert not (tmp_path / "cache").exists()  # data.cache=false writes nothing
    built = prepare_data(config(tmp_path), tokenizer)
    assert "data: cache written to" in caplog.text and "from cache" not in caplog.text
    report = json.loads(report_files(uncached, tmp_path / "a")["data_report.json"])
    assert report["skipped"] == {"empty_response": 4}  # the file's 4 empty answers: skipped.jsonl is not empty
    assert report["encoding"]["train"]["prompt_truncated"] > 0 and report["encoding"]["train"]["dropped_too_long"] > 0

    def fail(*args, **kwargs):
        raise AssertionError("a cached run must not load or tokenize")

    monkeypatch.setattr(prepare, "load_data", fail)
    monkeypatch.setattr(prepare, "encode_splits", fail)
    caplog.clear()
    reused = prepare_data(config(tmp_path), tokenizer)
    key = data_key(config(tmp_path), tokenizer)
    assert f"data: tokenized pairs from cache {tmp_path / 'cache' / f'data-{key}'} (key {key})" in caplog.text
    assert "pairs kept at max_length=96" in caplog.text and "prompts lost leading turns" in caplog.text  # said again
    for data in (built, reused):
        assert rows(data.train) == rows(uncached.train) and rows(data.eval) == rows(uncached.eval)
        assert (data.subsets, data.loaded) == (uncached.subsets, uncached.loaded)
        assert data.report.describe() == uncached.report.describe()
    want = report_files(uncached, tmp_path / "a")
    assert report_files(built, tmp_path / "b") == want and report_files(reused, tmp_path / "c") == want


@pytest.mark.slow
def test_one_synthetic_entry_serves_every_run_directory(tmp_path, tokenizer, caplog):
    """Generated data lands in each run directory, so the report's origins name it: stored with a stand-in."""

    def synthetic(run: str, **changes) -> RunConfig:
        cfg = build(RunConfig, {"output_dir": str(tmp_path / run), "data": {"synthetic": {"n_train": 60}}}, "test")
        cfg.data.cache_dir, cfg.collator.max_length = str(tmp_path / "cache"), 22
        for key, value in changes.items():
            setattr(cfg.data, key, value)
        return cfg

    prepare_data(synthetic("a"), tokenizer)
    caplog.set_level(logging.INFO, logger="rm")
    reused = prepare_data(synthetic("b"), tokenizer)
    assert "from cache" in caplog.text
    plain = prepare_data(synthetic("b", cache=False), tokenizer)
    dropped = plain.report.notes["encoding"]["train"]["dropped_too_long_origins"]
    assert dropped and all(o.startswith(str(tmp_path / "b" / "data")) for o in dropped)
    assert report_files(reused, tmp_path / "x") == report_files(plain, tmp_path / "y")
    assert rows(reused.train) == rows(plain.train) and (tmp_path / "b" / "data").is_dir()


@pytest.mark.slow
def test_tokenizing_in_processes_gives_the_same_data(tmp_path, tokenizer):
    one = prepare_data(config(tmp_path, data__cache=False), tokenizer)
    three = prepare_data(config(tmp_path, data__cache=False, data__num_proc=3), tokenizer)
    assert rows(three.train) == rows(one.train) and rows(three.eval) == rows(one.eval)
    assert report_files(three, tmp_path / "three") == report_files(one, tmp_path / "one")


def test_every_input_changes_the_key(tmp_path, tokenizer):
    source = tmp_path / "pairs.jsonl.gz"
    shutil.copy(HH_HARMLESS_TEST, source)
    base = data_key(config(tmp_path, source), tokenizer)
    assert data_key(config(tmp_path, source), tokenizer) == base  # stable
    other_tokenizer = train_bpe(["a b c", "d e f"], vocab_size=300)
    changed = {
        "max_length": data_key(config(tmp_path, source, collator__max_length=97), tokenizer),
        "tokenizer": data_key(config(tmp_path, source), other_tokenizer),
        "split_seed": data_key(config(tmp_path, source, data__split_seed=1), tokenizer),
        "format": data_key(config(tmp_path, source, data__format="hh"), tokenizer),
        "columns": data_key(config(tmp_path, source, data__columns={"chosen": "chosen"}), tokenizer),
        "max_train_pairs": data_key(config(tmp_path, source, data__max_train_pairs=100), tokenizer),
    }
    chat = train_bpe(["a b c", "d e f"], vocab_size=300)
    chat.chat_template = "{{ messages }}"
    changed["chat template"] = data_key(config(tmp_path, source), chat)
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # touched: same bytes, new mtime
    changed["touched"] = data_key(config(tmp_path, source), tokenizer)
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed
    # Options that change nothing in the pairs leave it alone.
    same = config(tmp_path, source, data__num_proc=2, data__cache_dir=str(tmp_path / "elsewhere"))
    assert data_key(same, tokenizer) == changed["touched"]


def damage(entry: Path, how: str) -> None:
    arrow = entry / "train.arrow"
    if how == "truncated":
        arrow.write_bytes(arrow.read_bytes()[:-100])
    elif how == "flipped":
        raw = bytearray(arrow.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        arrow.write_bytes(bytes(raw))
    else:  # killed before the marker was written
        (entry / cache.MARKER).unlink()


@pytest.mark.parametrize("how", ["truncated", "flipped", "no marker"])
@pytest.mark.slow
def test_a_damaged_entry_is_rebuilt_not_read(tmp_path, tokenizer, caplog, how):
    cfg = config(tmp_path)
    want = rows(prepare_data(cfg, tokenizer).train)  # read now: the pairs are views of the file damaged below
    [entry] = entries(cfg)
    damage(entry, how)
    caplog.set_level(logging.INFO, logger="rm")
    got = prepare_data(cfg, tokenizer)
    assert f"data: cache {entry} unusable" in caplog.text and "data: cache written to" in caplog.text
    assert "from cache" not in caplog.text
    assert rows(got.train) == want
    assert entries(cfg) == [entry] and cache.problem(entry) is None
    assert not list(Path(cfg.data.cache_dir).glob("*.tmp-*"))  # the damaged copy was removed


@pytest.mark.slow
def test_leftover_temporary_folders(tmp_path, tokenizer, caplog):
    """A process killed while writing leaves `<name>.tmp-*`: never read; removed once it is an hour old."""
    cfg = config(tmp_path)
    name = f"data-{data_key(cfg, tokenizer)}"
    root = tmp_path / "cache"
    fresh, stale = root / f"{name}.tmp-1-aaaa", root / f"{name}.tmp-2-bbbb"
    for folder in (fresh, stale):
        folder.mkdir(parents=True)
        (folder / "train.arrow").write_bytes(b"half written")
    old = time.time() - 2 * cache.STALE_TMP_S
    os.utime(stale, (old, old))
    caplog.set_level(logging.INFO, logger="rm")
    data = prepare_data(cfg, tokenizer)
    assert "data: cache written to" in caplog.text and len(data.train) > 0
    assert fresh.exists() and not stale.exists()  # a fresh one may belong to a live process


def test_the_loser_of_two_renames_uses_the_winners_entry(tmp_path):
    root = tmp_path / "cache"
    first, second = cache.new_entry(root, "data-x"), cache.new_entry(root, "data-x")
    (first / "a.txt").write_text("first")
    (second / "a.txt").write_text("second")
    assert cache.publish(first, "data-x") == root / "data-x"
    assert cache.publish(second, "data-x") == root / "data-x"
    assert (root / "data-x" / "a.txt").read_text() == "first" and not second.exists()


BUILDER = """
import hashlib, json, sys, time
from pathlib import Path
from rm.config import RunConfig, build
from rm.tokens.prepare import prepare_data
from rm.tokens.tokenizer import load_tokenizer
cfg = build(RunConfig, json.loads(sys.argv[1]), "test")
tokenizer = load_tokenizer(sys.argv[2])
go = Path(sys.argv[3])
while not go.exists():
    time.sleep(0.01)
data = prepare_data(cfg, tokenizer)
print(hashlib.sha256(repr([data.train, data.eval, data.report]).encode()).hexdigest())
"""


@pytest.mark.slow
def test_two_processes_building_one_key_at_once(tmp_path, tokenizer):
    """Both start building (released together after their imports) and both end with the same, valid data."""
    cfg = config(tmp_path)
    raw = {"output_dir": cfg.output_dir, "collator": {"max_length": 96}}
    raw["data"] = {"source": str(HH_HARMLESS_TEST), "cache_dir": cfg.data.cache_dir, **DATA}
    tokenizer.save_pretrained(tmp_path / "tok")
    go = tmp_path / "go"
    env = os.environ | {"PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", BUILDER, json.dumps(raw), str(tmp_path / "tok"), str(go)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in "ab"]
    time.sleep(3)
    go.touch()
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    digests = {out.strip() for out, _ in outputs}
    assert len(digests) == 1
    [entry] = entries(cfg)
    assert cache.problem(entry) is None and not list(entry.parent.glob("*.tmp-*"))


@pytest.mark.slow
def test_a_cold_run_trains_from_the_mapped_entry_it_wrote(tmp_path, tokenizer):
    """Once written, the entry's files replace the heap copy: cold and cached runs hold the same memory."""
    data = prepare_data(config(tmp_path), tokenizer)
    [entry] = entries(config(tmp_path))
    path = str((entry / "train.arrow").resolve())
    spans = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5] == path:
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            spans.append((lo, hi))
    ids = data.train.table.column("prompt_ids").chunk(0).buffers()[-1]  # the list's values
    assert spans and any(lo <= ids.address < hi for lo, hi in spans)
