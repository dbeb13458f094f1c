"""Batched tokenization into Arrow columns gives exactly what one tokenizer call per text into Python lists
gave: the same ids, the same truncations and drops (issue 12), checked on the real HH file against a
per-text encoder written here."""

import numpy as np
import pytest

import rm.tokens.encode as encode
from conftest import HH_HARMLESS_TEST
from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.load import LoadedData, load_pairs
from rm.tokens.encode import EncodeReport, encode_kept, encode_pairs, encode_splits, release_texts
from rm.tokens.ids import batch_ids
from rm.tokens.store import EncodedGroup, EncodedSplit
from rm.tokens.tokenizer import special_prefix, train_bpe
from rm.tokens.truncation import later_turns


def one_call_per_text(pairs, tokenizer, max_length):
    """The encoder before batching, kept as the reference."""
    prefix, report, out = special_prefix(tokenizer), EncodeReport(), []

    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    for pair in pairs:
        chosen, rejected = ids(pair.chosen), ids(pair.rejected)
        room = max_length - len(prefix) - max(len(chosen), len(rejected))
        if room < 0:
            report.too_long.append(pair.origin)
            continue
        prompt = ids(pair.prompt)
        if len(prompt) > room:
            report.prompt_truncated += 1
            for shorter in later_turns(pair.prompt, pair.turn_starts):
                prompt = ids(shorter)
                if len(prompt) <= room:
                    break
            if len(prompt) > room:
                report.prompt_cut_inside_turn += 1
                prompt = prompt[len(prompt) - room :] if room else []
        out.append(EncodedGroup.pair(prefix + prompt, chosen, rejected, 0, pair.margin or 0.0, len(out)))
    report.kept = len(out)
    return out, report


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
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


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_encoding_falls_back_when_the_direct_call_disagrees_on_the_first_chunk(monkeypatch):
    pairs = load_pairs(str(HH_HARMLESS_TEST), "test", [], DataConfig(on_bad_record="skip"))[:300]
    tokenizer = train_bpe([t for p in pairs for t in (p.prompt, p.chosen, p.rejected)], 1000)
    want, want_report = one_call_per_text(pairs, tokenizer, 200)
    real = encode.batch_ids

    def disagreeing(tok, direct=True):  # a direct call off by one id, as a tokenizer class with its own steps
        many, _ = real(tok, direct=False)
        return ((lambda texts: [[i + 1 for i in ids] for ids in many(texts)]), True) if direct else (many, False)

    monkeypatch.setattr(encode, "batch_ids", disagreeing)
    got, report = encode_pairs(pairs, tokenizer, 200, ["harmless-base"])
    assert report == want_report
    assert [p.prompt_ids.tolist() + p.chosen_ids.tolist() for p in got] == [p.prompt_ids + p.chosen_ids for p in want]
