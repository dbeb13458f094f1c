"""Record formats: each raw record becomes `Pair`s (a shared prompt and two answers) or a `RecordError`.

`parse` picks the format (hh, prompt, conversation, argilla); `hh` and `chat` split HH text and message
lists at the same turn (`turns`); `argilla` reads the Japanese Argilla export; `pair` holds the `Pair`
and the field checks every format shares.
"""
