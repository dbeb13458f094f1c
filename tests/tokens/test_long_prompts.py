"""A prompt of many turns is fitted at a cost bounded by the room, with the ids the linear rule gives.

The linear rule (rule 2 of rm/tokens/truncation.py read literally, kept below as the reference) tokenizes the
prompt from each later user turn until one fits: quadratic in the turns, which any client can send as many of as
it likes. `rm.tokens.turn_search` must keep the very same prompt ids while tokenizing only a few candidates.
"""

import random

import pytest

from rm.data.formats.chat import Message, Renderer
from rm.tokens.ids import batch_ids
from rm.tokens.tokenizer import train_bpe
from rm.tokens.truncation import prompt_room, truncate_group
from rm.tokens.turn_search import TurnSearch, fitting_turns, longest_token, search

WORDS = ["the", "cat", "sat", "on", "a", "mat", "why", "?", "!", "éclair", "ünïcode", "数字", "12345", "   ", "\t", ""]
QA_TEMPLATE = (
    "{%- for m in messages -%}{{ '\\n\\n' ~ ('Q' if m['role'] == 'user' else 'A') ~ ': ' ~ m['content'] }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{ '\\n\\nA:' }}{%- endif -%}"
)


def linear_later_turns(prompt: str, starts: tuple[int, ...] | None) -> list[str]:
    """The candidates as the linear rule built them: every suffix at once."""
    if starts is None:
        found, i = [], prompt.find("\n\nHuman:", 1)
        while i >= 0:
            found.append(i)
            i = prompt.find("\n\nHuman:", i + 1)
        starts = tuple(found)
    return [prompt[i:] for i in starts if 0 < i < len(prompt)]


def ids_of(tokenizer):
    """The batch call training uses (the tokenizer's own, without transformers' per-call overhead)."""
    return batch_ids(tokenizer)[0]


def content(rng: random.Random) -> str:
    n = rng.choice([0, 1, 2, 5, 12, 30, 80])
    text = " ".join(rng.choice(WORDS) for _ in range(n))
    return text + rng.choice(["", " ", "  ", "\n", "."])  # whitespace before the next tag, too


def hh_prompt(rng: random.Random, turns: int) -> str:
    text = "".join(f"\n\nHuman: {content(rng)}\n\nAssistant: {content(rng)}" for _ in range(turns - 1))
    return text + f"\n\nHuman: {content(rng)}\n\nAssistant:"


@pytest.fixture(scope="module")
def tokenizers(tokenizer):
    """The suite's BPE (400 tokens on generated pairs), and one trained on these prompts with long merges."""
    rng = random.Random(1)
    texts = [hh_prompt(rng, 4) for _ in range(200)] + ["the cat sat on a mat " * 20] * 50
    return [tokenizer, train_bpe(texts, 600)]


def check_same(tokenizer, prompt: str, starts, rooms, response_lengths) -> int:
    """The new rule's ids and flags equal the linear rule's for each room; returns how many lost turns."""
    many, longest = ids_of(tokenizer), longest_token(tokenizer)
    assert longest is not None
    p, *later = many([prompt, *linear_later_turns(prompt, starts)])  # the linear rule's, tokenized once
    cut = 0
    for room in rooms:
        for n in response_lengths:
            responses, max_length = [[7] * n], room + n
            want = truncate_group(p, responses, max_length, [], lambda: later)
            for bound in (longest, None):  # with and without skipping by characters
                r = prompt_room(responses, max_length, [])
                shorter = lambda b=bound, r=r: fitting_turns(prompt, starts, r, b, many)  # noqa: E731
                got = truncate_group(p, responses, max_length, [], shorter)
                assert (got.prompt_ids, got.prompt_truncated, got.cut_inside_turn) == (
                    want.prompt_ids, want.prompt_truncated, want.cut_inside_turn
                ), (prompt, room, bound)  # fmt: skip
            cut += want.prompt_truncated and not want.cut_inside_turn
    return cut


@pytest.mark.slow
def test_the_search_keeps_the_linear_rules_ids_on_random_hh_prompts(tokenizers):
    rng = random.Random(0)
    lost_turns = 0
    for tok in tokenizers:
        for _ in range(60):
            prompt = hh_prompt(rng, rng.choice([1, 2, 3, 5, 9, 17, 30]))
            n = len(tok(prompt, add_special_tokens=False)["input_ids"])
            rooms = sorted({rng.randint(1, max(1, n)) for _ in range(6)} | {1, max(1, n - 1)})
            lost_turns += check_same(tok, prompt, None, rooms, [1])
    assert lost_turns > 200  # the search did the work, not just the fits and the cuts inside a turn


def test_the_search_keeps_the_linear_rules_ids_at_chat_template_turns(tokenizers):
    """Turn starts the renderer marks (a template without HH tags), as training and `rm score` get them."""
    rng = random.Random(2)
    tok = tokenizers[1]
    tok.chat_template = QA_TEMPLATE
    renderer = Renderer(tok)
    lost_turns = 0
    for _ in range(40):
        turns = rng.choice([2, 4, 7, 15, 30])
        messages = [Message("user" if i % 2 == 0 else "assistant", content(rng) or "x") for i in range(2 * turns - 1)]
        text = renderer.group(messages, [[Message("assistant", "fine")]], ["chosen"])
        n = len(tok(text.prompt, add_special_tokens=False)["input_ids"])
        rooms = sorted({rng.randint(1, n) for _ in range(6)})
        lost_turns += check_same(tok, text.prompt, text.turn_starts, rooms, [1])
    assert lost_turns > 50


def test_the_tokenizer_sees_characters_bounded_by_the_room_not_by_the_turns(tokenizers):
    """100,000 turns: the probes' characters stay within a few rooms' worth of the longest token, whatever the
    room (the linear rule handed the tokenizer every suffix: about 100,000^2 / 2 x 30 characters)."""
    tok = tokenizers[1]
    turn = "\n\nHuman: why the cat sat?\n\nAssistant: on a mat."
    prompt = turn * 100_000 + "\n\nHuman: and then?\n\nAssistant:"
    many, longest = ids_of(tok), longest_token(tok)
    seen: list[int] = []

    def counted(texts: list[str]) -> list:
        seen.extend(map(len, texts))
        return many(texts)

    for room in (5, 40, 300, 2_000):
        seen.clear()
        [kept] = fitting_turns(prompt, None, room, longest, counted)
        text = tok.decode(kept)
        if room == 5:  # even the last turn is too long: its ids, to keep the newest tokens of
            assert prompt.endswith(text) and text.startswith("\n\nHuman: and") and len(kept) > room
        else:  # the first that fits, longest first
            assert prompt.endswith(text) and len(kept) <= room < len(many([turn + text])[0])
        assert sum(seen) <= 6 * room * longest, (room, len(seen), sum(seen))
        assert len(seen) <= 30


def test_prompts_of_a_chunk_search_together():
    """Training's rounds: one tokenizer call a round for every prompt still searching, each prompt its own room."""
    tok = train_bpe(["Human: a b c Assistant: d e f"] * 20, 300)
    many = ids_of(tok)
    turns = ["".join(f"\n\nHuman: {'a ' * k}\n\nAssistant: b" for k in range(t)) for t in (3, 50, 400)]
    prompts = [t + "\n\nHuman: q\n\nAssistant:" for t in turns]
    calls: list[int] = []

    def counted(texts: list[str]) -> list:
        calls.append(len(texts))
        return many(texts)

    searches = [TurnSearch(p, None, 20 + 3 * k, longest_token(tok)) for k, p in enumerate(prompts)]
    search(searches, counted)
    for s, p in zip(searches, prompts, strict=True):
        alone = fitting_turns(p, None, s.room, longest_token(tok), many)
        assert s.result == alone
    assert calls[0] == 3 and all(n <= 3 for n in calls)  # one call a round, not one per prompt


def test_a_tokenizer_that_drops_characters_gets_no_bound():
    """Whitespace that BERT's pre-tokenizer drops would let a long text have few tokens: no bound, every
    candidate searched (the search stays exact, only the skipping by characters goes)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    assert longest_token(PreTrainedTokenizerFast(tokenizer_object=backend)) is None
    assert longest_token(train_bpe(["abc abc"], 300)) >= 3


def test_a_replace_normalizer_that_shortens_the_text_gets_no_bound():
    """Collapsing runs of spaces (a regex, or a string replaced by a shorter one) drops characters: a text of more
    than room x L characters could then still fit, so no bound; " " -> "▁" (SentencePiece-style) keeps one."""
    from tokenizers import Regex, Tokenizer, models, normalizers
    from transformers import PreTrainedTokenizerFast

    def bound(normalizer) -> int | None:
        backend = Tokenizer(models.BPE({"a": 0, "▁": 1, " ": 2}, []))
        backend.normalizer = normalizer
        return longest_token(PreTrainedTokenizerFast(tokenizer_object=backend))

    assert bound(normalizers.Replace(Regex(" +"), " ")) is None
    assert bound(normalizers.Replace("  ", " ")) is None
    assert bound(normalizers.Replace(" ", "▁")) == 1
