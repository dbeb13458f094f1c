"""A `collator.max_length` too small for the data is said, with the length that would do.

At `collator.max_length=8` the quickstart dropped 2,452 of 9,000 pairs and cut every other prompt inside its last
turn, yet said "data: 9000 train pairs" and exited 0. The warning now states the pairs kept and, where more
than 5% are dropped or cut inside a turn, the max_length that keeps 99% of them whole; the data line counts
the pairs kept.
"""

import logging
import math

from accelerate import Accelerator

from conftest import QUICKSTART, TINY_MODEL
from rm.config import load_config
from rm.data.load import load_pairs
from rm.tokens.encode import encode_pairs
from rm.training.run import load_and_encode


def p99_by_hand(tokenizer, pairs) -> int:
    """Nearest rank: the smallest length with at least 99% of the pairs at or below it (no BOS here)."""
    ids = lambda texts: [len(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]  # noqa: E731
    prompt, chosen, rejected = (ids([getattr(p, k) for p in pairs]) for k in ("prompt", "chosen", "rejected"))
    lengths = sorted(p + max(c, r) for p, c, r in zip(prompt, chosen, rejected, strict=True))
    return lengths[math.ceil(0.99 * len(lengths)) - 1]


def test_a_costly_max_length_names_the_one_that_keeps_99_percent(tokenizer, synthetic_root, caplog):
    pairs = load_pairs(str(synthetic_root), "train", [])[:200]
    subsets = sorted({p.subset for p in pairs})
    _, report = encode_pairs(pairs, tokenizer, 8, subsets)
    assert report.keeps_99 == p99_by_hand(tokenizer, pairs) > 8
    assert report.kept + len(report.too_long) == 200 and report.too_long
    with caplog.at_level(logging.WARNING, logger="rm"):
        report.warn("train", 8)
    assert f"train: {report.kept} of 200 pairs kept at max_length=8" in caplog.text
    assert f"collator.max_length={report.keeps_99} keeps 99% of the pairs whole" in caplog.text

    caplog.clear()
    _, roomy = encode_pairs(pairs, tokenizer, report.keeps_99, subsets)  # at most 1% cut: no advice
    with caplog.at_level(logging.WARNING, logger="rm"):
        roomy.warn("train", report.keeps_99)
    assert "keeps 99%" not in caplog.text


def test_the_data_line_counts_the_pairs_kept_not_those_loaded(tmp_path, caplog):
    overrides = ["data.synthetic.n_train=120", "data.synthetic.n_eval=30", *TINY_MODEL, "collator.max_length=8"]
    cfg = load_config(QUICKSTART, [*overrides, f"output_dir={tmp_path}", "data.cache=false"])
    with caplog.at_level(logging.INFO, logger="rm"):
        data = load_and_encode(cfg, Accelerator(cpu=True))
    kept, loaded = len(data.train), sum(data.loaded["train"].values())
    assert 0 < kept < loaded == 120
    assert f"data: {kept} train pairs {data.kept('train')}, {len(data.eval)} eval pairs" in caplog.text
