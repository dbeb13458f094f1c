"""Pairs to token ids: the tokenizer (named, or a BPE trained on the pairs), the one rule that fits a text into
`collator.max_length`, the encoded groups as Arrow columns, and the tokenized-data cache.

The unit here is a group: one prompt and its responses, with what is known about their order (a pair is a
group of two, chosen over rejected). `prepare` is the whole room in one function: a key, then either the
cached entry or load -> tokenizer -> encode -> entry.
"""
