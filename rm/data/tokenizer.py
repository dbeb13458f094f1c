"""Tokenizers: loaded by name, or trained on the fly (byte-level BPE) for models built from scratch.

Training one here keeps the quickstart and the tests offline. Byte-level BPE with GPT-2's
pre-tokenizer splits before a space and between letters and punctuation, so the prompt (which ends
in "Assistant:") and a response (which starts with a space) tokenize the same apart as together.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

EOS = "<|endoftext|>"
PAD = "<|pad|>"


def train_bpe(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with distinct eos and pad tokens (pad never equals a real token)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, model_max_length=1 << 30)


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    tok = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    if tok.pad_token_id is None:
        # Many decoders ship without a pad token. Reusing eos is safe here because rm finds the
        # last real token from the attention mask, never by searching for pad_token_id.
        tok.pad_token = tok.eos_token
    return tok


def special_prefix(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids the tokenizer puts in front of a text (e.g. Llama's BOS); nothing is appended after."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start])
    return []
