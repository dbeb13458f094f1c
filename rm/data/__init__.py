"""Preference data: records read from files, folders or the Hub, parsed per format into `Pair`s, and tokenized.

A batch starts here: `sources` reads raw records with their file:line, `formats` (with `hh`, `chat` and
`argilla`) turns each into `Pair`s or a counted `RecordError`, `load` picks splits, subsets and mixtures,
and `encode` tokenizes each prompt once into an `EncodedSplit` (`store`: Arrow columns of int32 ids, read as
`EncodedPair`s) for `rm/collate/`.
"""
