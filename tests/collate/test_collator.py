import pytest
import torch

from rm.collate.padded import PaddedCollator
from rm.data.formats.pair import Pair
from rm.data.load import load_pairs
from rm.tokens.encode import encode_pairs
from rm.tokens.store import EncodedGroup


def test_padded_collator_matches_its_docstring_example():
    batch = [EncodedGroup.pair([5, 6], [8], [11, 12], 0, margin=0.5), EncodedGroup.pair([7], [9, 10], [13], 1)]
    out = PaddedCollator(pad_token_id=0)(batch)
    assert out["input_ids"].tolist() == [[5, 6, 8, 0], [7, 9, 10, 0], [5, 6, 11, 12], [7, 13, 0, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]
    assert out["prompt_lengths"].tolist() == [2, 1]
    assert out["subset_ids"].tolist() == [0, 1]
    assert out["margin"].tolist() == [0.5, 0.0]
    assert all(isinstance(v, torch.Tensor) for v in out.values())


def test_prompt_and_responses_tokenize_the_same_apart_as_together(tokenizer, synthetic_root):
    """Encoding the prompt once and each response once must give the ids of the whole text."""
    pairs = load_pairs(str(synthetic_root), "test", [])
    encoded, report = encode_pairs(pairs, tokenizer, 512, sorted({p.subset for p in pairs}))
    assert report.kept == len(pairs) and not report.too_long
    for pair, enc in zip(pairs, encoded, strict=True):
        whole = tokenizer(pair.prompt + pair.chosen, add_special_tokens=False)["input_ids"]
        assert [*enc.prompt_ids, *enc.chosen_ids] == whole
        whole = tokenizer(pair.prompt + pair.rejected, add_special_tokens=False)["input_ids"]
        assert [*enc.prompt_ids, *enc.rejected_ids] == whole


def conversation(n_turns):
    return "".join(f"\n\nHuman: question number {i} here\n\nAssistant: answer {i}" for i in range(n_turns))


def test_long_prompts_lose_whole_leading_turns(tokenizer):
    prompt = conversation(6) + "\n\nHuman: final question?\n\nAssistant:"
    pair = Pair(prompt, " yes indeed", " no", "s", origin="f:1")
    full = len(tokenizer(prompt)["input_ids"]) + len(tokenizer(" yes indeed")["input_ids"])
    (enc,), report = encode_pairs([pair], tokenizer, full - 5, ["s"])
    assert report.prompt_truncated == 1
    text = tokenizer.decode(enc.prompt_ids)
    assert text.startswith("\n\nHuman:") and text.endswith("\n\nHuman: final question?\n\nAssistant:")
    assert len(enc.prompt_ids) + len(enc.chosen_ids) <= full - 5
    assert prompt.endswith(text) and len(text) < len(prompt)


def test_pairs_that_cannot_fit_are_dropped_and_listed(tokenizer):
    long_answer = " word" * 50
    pairs = [Pair("\n\nHuman: q\n\nAssistant:", long_answer, " no", "s", origin="f:7"), Pair("Q", " a", " b", "s")]
    encoded, report = encode_pairs(pairs, tokenizer, 20, ["s"])
    assert report.too_long == ["f:7"] and report.kept == 1 and len(encoded) == 1


@pytest.mark.parametrize("max_length", [3, 4])
def test_last_turn_alone_too_long_is_cut_from_the_left(tokenizer, max_length):
    pair = Pair("\n\nHuman: a very long single question indeed\n\nAssistant:", " a", " b", "s")
    (enc,), report = encode_pairs([pair], tokenizer, max_length, ["s"])
    room = max_length - max(len(enc.chosen_ids), len(enc.rejected_ids))
    assert room >= 1 and len(enc.prompt_ids) == room
    full = tokenizer(pair.prompt, add_special_tokens=False)["input_ids"]
    assert enc.prompt_ids.tolist() == full[len(full) - room :]
