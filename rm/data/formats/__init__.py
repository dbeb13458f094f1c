"""Record formats: each raw record becomes `Pair`s (a shared prompt and two answers), a `Group` (one prompt and
K ranked answers), a `Row` (one answer and its score) or a `RecordError`.

`parse` picks the format; `hh` and `chat` split HH text and message lists at the same turn (`turns`);
`argilla` reads the Japanese Argilla export; `ranked` the K-response formats (UltraFeedback, Nectar,
RewardBench 2, a generic `responses` list) and `rows` one row per response (HelpSteer2); `pair` and `group`
hold the `Pair` and the `Group` and the field checks the formats share.
"""
