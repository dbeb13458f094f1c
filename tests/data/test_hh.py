import gzip
import json

import pytest

from conftest import HH_HARMLESS_TEST
from rm.data.formats.hh import ASSISTANT, parse_turns, split_pair


def conv(*turns):
    return "".join(f"\n\nHuman: {h}\n\nAssistant: {a}" for h, a in turns)


def test_parse_turns_keeps_every_character():
    text = conv(("hi", "hello"), ("2+2?", "4.\nHuman: not a tag without blank line"))
    turns = parse_turns(text)
    assert [t.role for t in turns] == ["Human", "Assistant", "Human", "Assistant"]
    assert turns[3].text == " 4.\nHuman: not a tag without blank line"
    assert "".join(t.tag + t.text for t in turns) == text


def test_split_at_the_final_turn():
    chosen = conv(("hi", "hello"), ("2+2?", "4"))
    rejected = conv(("hi", "hello"), ("2+2?", "5"))
    prompt, c, r = split_pair(chosen, rejected)
    assert prompt == "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: 2+2?\n\nAssistant:"
    assert (c, r) == (" 4", " 5")


def test_split_when_the_pair_parts_before_the_final_turn():
    chosen = conv(("steal?", "No."), ("please", "Still no."))
    rejected = conv(("steal?", "Sure, easy."), ("please", "Step two."))
    prompt, c, r = split_pair(chosen, rejected)
    assert prompt == "\n\nHuman: steal?\n\nAssistant:"
    assert c == " No.\n\nHuman: please\n\nAssistant: Still no."
    assert r == " Sure, easy.\n\nHuman: please\n\nAssistant: Step two."


def test_split_when_the_pair_parts_at_a_human_turn():
    """The shared assistant turn before it moves into both responses; the prompt ends on the tag."""
    chosen = conv(("a", "b"), ("c", "d"))
    rejected = conv(("a", "b"), ("x", "y"))
    prompt, c, r = split_pair(chosen, rejected)
    assert prompt == "\n\nHuman: a\n\nAssistant:"
    assert c == " b\n\nHuman: c\n\nAssistant: d"


def test_split_when_one_conversation_is_longer():
    chosen = conv(("a", "b"), ("c", "d"))
    rejected = conv(("a", "b"))
    prompt, c, r = split_pair(chosen, rejected)
    assert prompt + c == chosen and prompt + r == rejected
    assert prompt.endswith(ASSISTANT)


def test_identical_pairs_and_untagged_text_are_errors():
    with pytest.raises(ValueError, match="identical"):
        split_pair(conv(("a", "b")), conv(("a", "b")))
    with pytest.raises(ValueError, match="does not start"):
        split_pair("Human: a", conv(("a", "b")))


@pytest.mark.skipif(not HH_HARMLESS_TEST.exists(), reason="shared HH-RLHF file not present")
def test_every_real_harmless_pair_splits_exactly():
    n = early = 0
    with gzip.open(HH_HARMLESS_TEST, "rt") as f:
        for line in f:
            rec = json.loads(line)
            prompt, c, r = split_pair(rec["chosen"], rec["rejected"])
            assert prompt + c == rec["chosen"] and prompt + r == rec["rejected"]
            assert prompt.endswith(ASSISTANT) and c != r
            early += ASSISTANT in c or ASSISTANT in r
            n += 1
    assert n == 2312
    assert 1 <= early <= 10  # a handful of real pairs part before the final turn
