"""Batched tokenization into Arrow columns gives exactly what one tokenizer call per text into Python lists
gave: the same ids, the same truncations and drops, checked on the real HH file against a
per-text encoder written here; spread over threads, and with a tokenizer loaded by path, too."""

import math
import multiprocessing
import os
import threading

import numpy as np
import pytest

import rm.tokens.encode as encode_module
import rm.tokens.ids as ids_module
import rm.tokens.tokenizer as tokenizer_module
from conftest import HH_HARMLESS_TEST
from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.load import LoadedData, load_pairs
from rm.tokens.encode import EncodeReport, encode_kept, encode_pairs, encode_splits, release_texts
from rm.tokens.ids import CheckedIds, batch_ids, ids_ahead
from rm.tokens.store import EncodedGroup, EncodedSplit
from rm.tokens.tokenizer import special_prefix, train_bpe, training_tokenizer
from rm.tokens.truncation import later_turns


def one_call_per_text(pairs, tokenizer, max_length):
    """The encoder before batching, kept as the reference."""
    prefix, report, out = special_prefix(tokenizer), EncodeReport(), []

    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    for pair in pairs:
        chosen, rejected, prompt = ids(pair.chosen), ids(pair.rejected), ids(pair.prompt)
        report.pair_tokens.append(len(prefix) + len(prompt) + max(len(chosen), len(rejected)))
        room = max_length - len(prefix) - max(len(chosen), len(rejected))
        if room < 0 or (room == 0 and prompt):  # no token of the prompt would stay: dropped too
            report.too_long.append(pair.origin)
            continue
        if len(prompt) > room:
            report.prompt_truncated += 1
            for shorter in later_turns(pair.prompt, pair.turn_starts):
                prompt = ids(shorter)
                if len(prompt) <= room:
                    break
            if len(prompt) > room:
                report.prompt_cut_inside_turn += 1
                prompt = prompt[len(prompt) - room :] if room else []
        out.append(EncodedGroup.pair(prefix + prompt, chosen, rejected, 0, margin=pair.margin or 0.0, index=len(out)))
    report.kept = len(out)
    ordered = sorted(report.pair_tokens)  # nearest-rank p99: the length 99% of the pairs fit in whole
    report.keeps_99 = ordered[math.ceil(0.99 * len(ordered)) - 1]
    return out, report


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
@pytest.mark.slow
def test_batched_encoding_equals_one_call_per_text_on_hh():
    cfg = DataConfig(on_bad_record="skip")
    pairs = load_pairs(str(HH_HARMLESS_TEST), "test", [], cfg)
    tokenizer = train_bpe([t for p in pairs[:500] for t in (p.prompt, p.chosen, p.rejected)], 2000)
    names = sorted({p.subset for p in pairs})
    got, got_report = encode_pairs(pairs, tokenizer, 256, names)
    want, want_report = one_call_per_text(pairs, tokenizer, 256)
    assert want_report.prompt_truncated > 0 and want_report.too_long  # both paths of fitting are exercised
    assert got_report == want_report
    assert isinstance(got, EncodedSplit) and len(got) == len(want) > 1024  # more than one record batch
    assert got.table.column("response_ids").num_chunks > 1
    fields = ("prompt_ids", "chosen_ids", "rejected_ids")
    for p in (got[0], got[-1]):  # views into the Arrow buffers, not copies
        assert all(isinstance(getattr(p, f), np.ndarray) and getattr(p, f).dtype == np.int32 for f in fields)
        assert not p.prompt_ids.flags.writeable
    assert [(*(getattr(p, f).tolist() for f in fields), p.subset_id, p.margin, p.index) for p in got] == [
        (*(getattr(p, f) for f in fields), p.subset_id, p.margin, p.index) for p in want
    ]
    lengths = np.array([[len(getattr(p, f)) for f in fields] for p in want]).T
    sizes = got.lengths()
    assert (sizes.prompt == lengths[0]).all() and (sizes.responses.reshape(-1, 2).T == lengths[1:]).all()


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
@pytest.mark.slow
def test_kept_positions_and_released_texts():
    pairs = load_pairs(str(HH_HARMLESS_TEST), "test", [], DataConfig(on_bad_record="skip"))[:300]
    tokenizer = train_bpe([t for p in pairs for t in (p.prompt, p.chosen, p.rejected)], 1000)
    split, report, kept = encode_kept(pairs, tokenizer, 200, ["harmless-base"])
    assert report.too_long and len(kept) == len(split) == report.kept
    assert [pairs[k].origin for k in kept] == [p.origin for p in pairs if p.origin not in report.too_long]
    want, _ = one_call_per_text([pairs[k] for k in kept], tokenizer, 200)
    assert [split[i].chosen_ids.tolist() for i in range(len(split))] == [p.chosen_ids for p in want]

    data = LoadedData(pairs[:200], pairs[200:], DataReport("skip"))
    encoding = encode_splits(data, tokenizer, 200, ["harmless-base"])
    train, held = encoding.train, encoding.eval
    release_texts(data)
    assert data.train == [] and data.eval == [] and encoding.note()["train"]["kept"] == len(train)
    assert len(train) + len(held) == len(split) and train[0].chosen_ids.tolist() == want[0].chosen_ids


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_consuming_encoding_frees_each_chunk_as_it_goes_and_encodes_the_same(monkeypatch):
    pairs = load_pairs(str(HH_HARMLESS_TEST), "test", [], DataConfig(on_bad_record="skip"))[:300]
    tokenizer = train_bpe([t for p in pairs for t in (p.prompt, p.chosen, p.rejected)], 1000)
    monkeypatch.setattr(encode_module, "CHUNK", 64)
    monkeypatch.setattr(encode_module, "TRIM_CHUNKS", 2)
    want, want_report, _ = encode_kept(pairs, tokenizer, 200, ["harmless-base"])
    handed, seen = list(pairs), []
    made = encode_module.record_batch
    monkeypatch.setattr(encode_module, "record_batch", lambda *a: seen.append(list(handed)) or made(*a))
    got, report, _ = encode_kept(handed, tokenizer, 200, ["harmless-base"], consume=True)
    assert report == want_report and handed == []
    assert got.table.equals(want.table)
    # When chunk n is made into a record batch, the chunks before it are gone from the list, the rest still there.
    assert [sum(x is None for x in held) for held in seen] == [64 * n for n in range(len(seen))] and len(seen) == 5


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_direct_rust_call_gives_transformers_ids_and_steps_aside_when_it_would_not():
    pairs = load_pairs(str(HH_HARMLESS_TEST), "test", [], DataConfig(on_bad_record="skip"))[:400]
    texts = [t for p in pairs for t in (p.prompt, p.chosen, p.rejected)]
    tokenizer = train_bpe(texts[:600], 1000)
    want = tokenizer(texts, add_special_tokens=False)["input_ids"]
    many, direct = batch_ids(tokenizer)
    assert direct and many(texts) == want
    # A backend left truncating (a tokenizer.json saved with truncation on): transformers turns it off per call.
    tokenizer.backend_tokenizer.enable_truncation(8)
    assert many(texts) == want
    tokenizer.backend_tokenizer.no_truncation()

    class Custom(type(tokenizer)):  # a class that changes how text is encoded is never bypassed
        def _encode_plus(self, *args, **kwargs):
            return super()._encode_plus(*args, **kwargs)

    assert batch_ids(Custom(tokenizer_object=tokenizer.backend_tokenizer))[1] is False


def hh_texts(n_pairs):
    pairs = load_pairs(str(HH_HARMLESS_TEST), "test", [], DataConfig(on_bad_record="skip"))[:n_pairs]
    return [t for p in pairs for t in (p.prompt, p.chosen, p.rejected)]


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_a_tokenizer_loaded_by_path_takes_the_direct_call_with_the_in_run_ids(tmp_path):
    """`tokenizer.name_or_path` naming a saved BPE: the same class, the same direct call, the same ids."""
    texts = hh_texts(400)
    in_run = train_bpe(texts[:600], 1000)
    in_run.save_pretrained(tmp_path)
    by_path = training_tokenizer(str(tmp_path))
    many, direct = batch_ids(by_path)
    assert direct and type(by_path) is type(in_run)
    assert many(texts) == batch_ids(in_run)[0](texts) == by_path(texts, add_special_tokens=False)["input_ids"]


class Recording:
    """A Rust tokenizer that notes which thread encoded each share (and hands the call on)."""

    def __init__(self, backend):
        self.backend, self.threads, self.shares = backend, set(), []

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def encode_batch_fast(self, texts, add_special_tokens):
        self.threads.add(threading.get_ident())
        self.shares.append(len(texts))
        return self.backend.encode_batch_fast(texts, add_special_tokens=add_special_tokens)


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_shares_go_to_threads_and_come_back_in_order(monkeypatch):
    """With TOKENIZERS_PARALLELISM=false (as `rm train` and the tests run) the batch still spreads over threads."""
    monkeypatch.setattr(ids_module, "THREADS", 3)
    texts = hh_texts(400)
    tokenizer = train_bpe(texts[:600], 1000)
    want = tokenizer(texts, add_special_tokens=False)["input_ids"]
    tokenizer._tokenizer = recording = Recording(tokenizer._tokenizer)
    many, direct = batch_ids(tokenizer)
    assert direct and many(texts) == want
    assert len(recording.shares) == 12 and sum(recording.shares) == len(texts) == 1200  # 4 shares a thread
    assert len(recording.threads) > 1 and threading.get_ident() not in recording.threads
    recording.shares.clear()
    assert many(texts[:100]) == want[:100] and recording.shares == [100]  # too few texts to share out


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_a_forked_child_tokenizes_on_threads_of_its_own():
    """The parent's threads do not come along into a fork (data.num_proc): the child's call must not hang."""
    texts = hh_texts(200)
    tokenizer = train_bpe(texts, 1000)
    many, _ = batch_ids(tokenizer)
    want = many(texts)  # the parent's threads exist now
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=lambda: child_end.send(many(texts)))
    child.start()
    got = parent_end.recv() if parent_end.poll(60) else None
    child.join(10)
    if child.is_alive():
        child.kill()
    assert got == want and child.exitcode == 0


def off_by_one(monkeypatch):
    """`batch_ids` with a direct call that is off by one id, as a tokenizer class with steps of its own would be."""
    real = ids_module.batch_ids

    def disagreeing(tok, direct=True):
        many, _ = real(tok, direct=False)
        return ((lambda texts: [[i + 1 for i in ids] for ids in many(texts)]), True) if direct else (many, False)

    monkeypatch.setattr(ids_module, "batch_ids", disagreeing)


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_checked_ids_fall_back_for_good_when_the_direct_call_disagrees(monkeypatch):
    texts = hh_texts(100)
    tokenizer = train_bpe(texts, 1000)
    want = tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert CheckedIds(tokenizer).direct
    off_by_one(monkeypatch)
    many = CheckedIds(tokenizer)
    assert many.direct and many(texts[:50]) == want[:50]  # the first call is checked: transformers' ids
    assert not many.direct and many(texts[50:]) == want[50:]  # and from then on through transformers


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
@pytest.mark.slow
def test_encoding_falls_back_when_the_direct_call_disagrees_on_the_first_chunk(monkeypatch):
    pairs = load_pairs(str(HH_HARMLESS_TEST), "test", [], DataConfig(on_bad_record="skip"))[:1500]
    tokenizer = train_bpe([t for p in pairs for t in (p.prompt, p.chosen, p.rejected)], 1000)
    want, want_report = one_call_per_text(pairs, tokenizer, 200)
    off_by_one(monkeypatch)
    got, report = encode_pairs(pairs, tokenizer, 200, ["harmless-base"])  # 2 chunks: the second one ahead
    assert report == want_report
    assert [p.prompt_ids.tolist() + p.chosen_ids.tolist() for p in got] == [p.prompt_ids + p.chosen_ids for p in want]


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_ids_ahead_gives_every_batch_in_order_the_first_one_alone():
    texts = hh_texts(100)
    tokenizer = train_bpe(texts, 1000)
    many, _ = batch_ids(tokenizer)
    events = []

    def noted(batch):
        j = batches.index(batch)
        events.append(("start", j))
        ids = many(batch)
        events.append(("end", j))
        return ids

    batches = [texts[i : i + 70] for i in range(0, len(texts), 70)]
    got = []
    for ids in ids_ahead(noted, batches):
        events.append(("got", len(got)))
        got.append(ids)
    assert got == [many(b) for b in batches] and len(got) == 5
    assert events.index(("end", 0)) < events.index(("start", 1))  # the first batch alone (a check settles)
    for j in range(2, 5):  # never more than one batch ahead of the caller
        assert events.index(("got", j - 2)) < events.index(("start", j))
    assert list(ids_ahead(many, [])) == []


def test_bpe_training_uses_rust_threads_for_the_call_only_and_never_in_a_fork(monkeypatch):
    """TOKENIZERS_PARALLELISM=false (`rm train`, the tests) is lifted around BPE training and put back; a forked
    child, and a process where it is unset, keep theirs. Learnt on one core or two, the vocabulary is the same."""
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    with tokenizer_module.rust_threads():
        assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    texts = [f"{i} pairs of words, and {i * 7} more words" for i in range(300)]
    learnt = train_bpe(texts, 400).backend_tokenizer.to_str()
    monkeypatch.setattr(tokenizer_module, "_STARTED_IN", -1)  # as in a forked child
    with tokenizer_module.rust_threads():
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    assert train_bpe(texts, 400).backend_tokenizer.to_str() == learnt
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    with tokenizer_module.rust_threads():
        assert "TOKENIZERS_PARALLELISM" not in os.environ


def test_rm_splits_a_batch_over_threads_only_when_the_librarys_own_threads_are_off(monkeypatch):
    from rm.tokens.ids import library_threads_off

    for value, off in (("false", True), ("0", True), ("FALSE ", True), ("true", False), ("1", False)):
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", value)
        assert library_threads_off() is off, value
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")  # unset: the library uses its own threads
    assert library_threads_off() is False


@pytest.mark.slow
def test_a_wider_word_cache_keeps_the_ids_of_a_tokenizer_that_caches_few_words(tmp_path):
    """rm widens a loaded BPE model's word cache (`tokenizer.WORD_CACHE`). The ids must not change
    when the words outnumber the library's default cache of 10,000 (and outnumber a cache cut to 100 here):
    compared with the same tokenizer, loaded afresh, whose cache is left alone."""
    import random

    from tokenizers import Tokenizer

    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 12))) for _ in range(12_000)]
    texts = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(2_000)]
    train_bpe(texts[:500], 600).save_pretrained(tmp_path)
    widened = training_tokenizer(str(tmp_path))
    many, direct = batch_ids(widened)
    small = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    small.model._resize_cache(100)
    assert direct
    assert many(texts) == [e.ids for e in small.encode_batch(texts, add_special_tokens=False)]
    assert many(texts[::-1]) == [e.ids for e in small.encode_batch(texts[::-1], add_special_tokens=False)]
