"""data.eos, how a response ends (rm/data/formats/text_rule.py's `response_end`, rm/tokens/ids.py's
`EndOfSequence`): the ids training and scoring build against the ids TRL's and OpenRLHF's own string rules give
(the tokenizer called on the whole text, EOS text included), never two EOS, the EOS kept last when a text is cut,
one-line refusals, and the tokenized-data cache key."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast

from conftest import QUICKSTART
from rm.config import load_config
from rm.data.formats.text_rule import response_end
from rm.data.load import load_pairs
from rm.errors import ConfigError
from rm.evaluation.record_texts import ScoreText
from rm.evaluation.score_file import encode_texts
from rm.tokens import cache
from rm.tokens.encode import encode_pairs
from rm.tokens.ids import EndOfSequence
from rm.tokens.prepare import bpe_key, data_key
from rm.tokens.tokenizer import special_prefix, train_bpe


def ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize(
    ("response", "eos", "written"),
    [
        (" It is 5.", "none", " It is 5."),
        (" It is 5.", "eos", " It is 5.<E>"),
        (" It is 5.", "space_eos", " It is 5. <E>"),
        (" It is 5.\n\n", "space_eos", " It is 5. <E>"),  # OpenRLHF strips trailing newlines first
        (" It is 5.\n", "eos", " It is 5.\n<E>"),  # TRL does not
        (" It is 5.<E>", "eos", " It is 5.<E>"),  # never two
        (" It is 5.<E>", "space_eos", " It is 5.<E>"),
        (" It is 5.<E>\n", "space_eos", " It is 5.<E>"),
    ],
)
def test_the_text_rule_ends_a_response_as_each_tool_does(response, eos, written):
    assert response_end(response, eos, "<E>") == written


def synthetic_pairs(synthetic_root: Path, n: int = 12):
    return load_pairs(str(synthetic_root), "train", [])[:n]


@pytest.mark.parametrize("eos", ["eos", "space_eos"])
def test_training_ids_are_the_tools_ids_of_the_whole_text(tokenizer, synthetic_root, eos):
    """Each encoded pair is, prompt then response, the ids the tool's own tokenizer call gives for its string:
    TRL's `prompt + chosen + eos_token`, OpenRLHF's `(prompt + chosen).rstrip("\\n") + " " + eos_token`; and the
    response ends with the eos id after the response's own ids (with the space, for space_eos)."""
    pairs = synthetic_pairs(synthetic_root)
    split, _ = encode_pairs(pairs, tokenizer, 512, sorted({p.subset for p in pairs}), eos=eos)
    token, space = tokenizer.eos_token, " " if eos == "space_eos" else ""
    for pair, group in zip(pairs, split, strict=True):
        for text, got in ((pair.chosen, group.chosen_ids), (pair.rejected, group.rejected_ids)):
            whole = (pair.prompt + text).rstrip("\n") if eos == "space_eos" else pair.prompt + text
            assert list(group.prompt_ids) + list(got) == ids(tokenizer, whole + space + token)
            assert list(got) == ids(tokenizer, text.rstrip("\n") if space else text) + ids(tokenizer, space) + [
                tokenizer.eos_token_id
            ]


def test_none_is_the_ids_as_before(tokenizer, synthetic_root):
    pairs = synthetic_pairs(synthetic_root)
    split, _ = encode_pairs(pairs, tokenizer, 512, sorted({p.subset for p in pairs}))
    assert [list(g.chosen_ids) for g in split] == [ids(tokenizer, p.chosen) for p in pairs]


@pytest.mark.parametrize("eos", ["eos", "space_eos"])
def test_a_text_already_ending_with_eos_gets_no_second(tokenizer, eos):
    texts = [ScoreText("reward", "\n\nHuman: hi\n\nAssistant:", " hello" + tokenizer.eos_token)]
    (group,) = encode_texts(tokenizer, texts, 512, special_prefix(tokenizer), eos)
    assert list(group.response_ids[0]) == ids(tokenizer, " hello") + [tokenizer.eos_token_id]


@pytest.mark.parametrize("eos", ["eos", "space_eos"])
def test_a_response_cut_to_fit_keeps_its_eos_last(tokenizer, eos):
    """`rm score`'s rule keeps a too-long response's end, so the EOS (where the reward is read) stays; training's
    cuts the prompt and never a response."""
    long = " " + " ".join(["word"] * 80)
    texts = [ScoreText("reward", "\n\nHuman: " + "why " * 40 + "\n\nAssistant:", long)]
    (cut,) = encode_texts(tokenizer, texts, 16, special_prefix(tokenizer), eos)
    assert cut.truncated and len(cut.prompt_ids) + len(cut.response_ids[0]) == 16
    assert cut.response_ids[0][-1] == tokenizer.eos_token_id
    (kept,) = encode_texts(tokenizer, [texts[0]._replace(response=" short")], 16, special_prefix(tokenizer), eos)
    assert kept.truncated and kept.response_ids[0][-1] == tokenizer.eos_token_id


def no_eos_tokenizer() -> PreTrainedTokenizerFast:
    bpe = train_bpe(["a b c d", "e f g"], vocab_size=300)
    return PreTrainedTokenizerFast(tokenizer_object=bpe.backend_tokenizer, pad_token="<|pad|>")


@pytest.mark.parametrize("eos", ["eos", "space_eos"])
def test_a_tokenizer_without_eos_is_one_line_naming_the_setting(eos):
    with pytest.raises(ConfigError) as e:
        EndOfSequence.of(no_eos_tokenizer(), eos)
    assert "data.eos" in str(e.value) and "\n" not in str(e.value)
    assert EndOfSequence.of(no_eos_tokenizer(), "none").texts(["x"]) == ["x"]


def test_a_tokenizer_reading_its_eos_text_as_text_is_refused(tokenizer):
    split = train_bpe(["a b c d", "e f g"], vocab_size=300)
    split.split_special_tokens = True
    with pytest.raises(ConfigError, match="split_special_tokens"):
        encode_texts(split, [ScoreText("reward", "", " a b")], 64, [], "eos")


def test_an_eos_that_takes_the_space_before_it_gives_the_tools_ids():
    """An EOS added with lstrip=True absorbs the space before it: OpenRLHF's `text + " " + eos` then has no space
    token, and rm, tokenizing that very text, has none either."""
    tok = train_bpe(["a b c d", "e f g"], vocab_size=300)
    tok.add_special_tokens({"eos_token": AddedToken("<|end|>", lstrip=True, special=True)})
    (group,) = encode_texts(tok, [ScoreText("reward", "", " a b")], 64, [], "space_eos")
    assert list(group.response_ids[0]) == ids(tok, " a b <|end|>") == ids(tok, " a b") + [tok.eos_token_id]


def test_stepwise_data_with_an_eos_is_refused(tokenizer):
    from rm.data.formats.group import Group

    step = Group("p", ("a", "b"), (0, 1), "s", steps=(("a",), ("b",)), step_labels=((1.0,), (0.0,)))
    with pytest.raises(ConfigError, match="stepwise"):
        encode_pairs([step], tokenizer, 64, ["s"], eos="eos")


def test_the_setting_is_checked_and_part_of_the_cache_key(tmp_path, tokenizer):
    with pytest.raises(ConfigError, match="data.eos"):
        load_config(QUICKSTART, ["data.eos=EOS"])
    cfg = load_config(QUICKSTART, [f"output_dir={tmp_path / 'run'}"])
    keys = {eos: data_key(replace(cfg, data=replace(cfg.data, eos=eos)), tokenizer) for eos in
            ("none", "eos", "space_eos")}  # fmt: skip
    assert len(set(keys.values())) == 3
    # none keys as before the setting existed: the key's data part is the config without the field
    state = cache.data_state(cfg.data)
    assert "eos" not in state["data"] and json.dumps(state, default=str)  # JSON-able
    assert cache.data_state(replace(cfg.data, eos="eos"))["data"]["eos"] == "eos"
    # the BPE learns the texts as written: one BPE for every convention
    assert bpe_key(cfg) == bpe_key(replace(cfg, data=replace(cfg.data, eos="space_eos")))
