"""Tokenizers: loaded by name, or trained on the fly (byte-level BPE) for models built from scratch.

Training one here keeps the quickstart and the tests offline. Byte-level BPE with GPT-2's
pre-tokenizer splits before a space and between letters and punctuation, so the prompt (which ends
in "Assistant:") and a response (which starts with a space) tokenize the same apart as together.

A tokenizer used for training adds no special tokens of its own (`training_tokenizer`): rm trains on
the ids that `tokenizer(text, add_special_tokens=False)` gives, which is how TRL's reward functions,
OpenRLHF and RewardBench's chat-template path tokenize, and the export's tokenizer then gives the very
same ids with `add_special_tokens=True` (pipelines, plain transformers). A BOS that a chat template
writes is part of the text, so it is kept everywhere alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from rm.errors import DataError

EOS = "<|endoftext|>"
PAD = "<|pad|>"
# HH text as a Jinja chat template: each message is "\n\n<Tag>: <content>", the generation prompt is
# "\n\nAssistant:". The tags are those of rm.data.formats.chat.HH_TAGS (a test holds the two equal).
HH_CHAT_TEMPLATE = (
    "{%- set tags = {'system': 'System', 'user': 'Human', 'assistant': 'Assistant'} -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] not in tags -%}"
    "{{ raise_exception('HH text has no role ' ~ message['role'] ~ ' (system, user, assistant only)') }}"
    "{%- endif -%}"
    "{{ '\\n\\n' ~ tags[message['role']] ~ ': ' ~ message['content'] }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '\\n\\nAssistant:' }}{%- endif -%}"
)

# The `prompt` format's text as a chat template: rm trains on `prompt + response` exactly as the record writes
# them, no separator and no tags, so the template only concatenates the messages' contents (a user message the
# prompt, an assistant message the response); a generation prompt adds nothing.
CONCAT_CHAT_TEMPLATE = "{%- for message in messages -%}{{ message['content'] }}{%- endfor -%}"


WORD_CACHE = 1 << 18
"""Words a loaded BPE model remembers the merges of. The library's default, 10,000, stops caching once full:
scripts/make_scale_data.py's 160,000 pairs hold 16,238 distinct words (plus one tag a pair in its tagged
variant), so the rest were merged afresh each time they came, and 30,000 pairs tokenized 17-20% slower
(median of 3, both variants). The ids are the same; the cold run's peak RSS went from 1.03 to
1.10 GiB on the tagged variant, whose tags fill the cache."""

PARALLELISM = "TOKENIZERS_PARALLELISM"
_STARTED_IN = os.getpid()
"""The process that imported this module: another pid here is a forked child."""


@contextmanager
def rust_threads() -> Iterator[None]:
    """The tokenizers library's own threads (Rayon) for the calls inside, even under TOKENIZERS_PARALLELISM=false.

    `rm train` and the Makefile set it, which left BPE training on one core: 8.0 s for an 8k vocabulary on
    20,000 real HH pairs, 3.2 s on two. The setting guards a forked child, whose parent's Rayon
    threads did not come along: so a forked process keeps it as it is, and it is put back afterwards, so the
    children of a later fork (`data.num_proc`) stay off Rayon. Unset, the library uses its threads anyway.
    """
    old = os.environ.get(PARALLELISM)
    if os.getpid() != _STARTED_IN or old is None:
        yield
        return
    os.environ[PARALLELISM] = "true"
    try:
        yield
    finally:
        os.environ[PARALLELISM] = old


def train_bpe(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with distinct eos and pad tokens (pad never equals a real token), learnt on
    every core (`rust_threads`)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    with rust_threads():
        tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, model_max_length=1 << 30)


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    tok = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    widen_word_cache(getattr(tok, "_tokenizer", None))
    if tok.pad_token_id is None:
        # Many decoders ship without a pad token. Reusing eos is safe here because rm finds the
        # last real token from the attention mask, never by searching for pad_token_id.
        tok.pad_token = tok.eos_token
    return tok


def widen_word_cache(backend: object) -> None:
    """`WORD_CACHE` words for a BPE backend (whose cache is a setting of the Rust object, not of the ids)."""
    resize = getattr(getattr(backend, "model", None), "_resize_cache", None)
    if callable(resize):
        resize(WORD_CACHE)


def adds_special_tokens(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether `add_special_tokens=True` changes the ids (a BOS in front, an EOS after…)."""
    probe = "a b"
    return (
        tokenizer(probe, add_special_tokens=True)["input_ids"]
        != tokenizer(probe, add_special_tokens=False)["input_ids"]
    )


def without_special_additions(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """The tokenizer made to add nothing around a text (its post-processor emptied), in place.

    Tokens that a text or chat template spells out (e.g. "<|begin_of_text|>") still map to their ids.
    """
    if not adds_special_tokens(tokenizer):
        return tokenizer
    if hasattr(tokenizer, "update_post_processor"):  # transformers 5 tokenizers-backed classes
        tokenizer.add_bos_token = False
        tokenizer.add_eos_token = False
    if adds_special_tokens(tokenizer) and hasattr(tokenizer, "backend_tokenizer"):
        tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1")
    if adds_special_tokens(tokenizer):
        raise DataError(
            f"{type(tokenizer).__name__}: cannot stop this tokenizer from adding special tokens around a text"
        )
    return tokenizer


def training_tokenizer(name_or_path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """The named tokenizer as rm trains with it: pad set, nothing added around a text (see the module doc)."""
    return without_special_additions(load_tokenizer(name_or_path, trust_remote_code))


def special_prefix(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids the tokenizer puts in front of a text (e.g. Llama's BOS); nothing is appended after."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start])
    return []
