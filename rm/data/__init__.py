"""Preference data as text: records read from files, folders or the Hub, parsed per format into `Pair`s.

`sources` reads raw records with their file:line, `formats` (with `hh`, `chat` and `argilla`) turns each
into `Pair`s or a counted `RecordError`, `load` picks splits, subsets and mixtures, and `data_report` keeps
what was skipped, repaired and changed. Nothing here knows a tokenizer: token ids are `rm/tokens/`.
"""
