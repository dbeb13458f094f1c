"""Training from the tokenized-data cache (rm/tokens/prepare.py): the same eval.json and data report as a run
that tokenizes, a trained tokenizer reused, and under 2 processes the splits tokenized once."""

import json
import logging
from pathlib import Path

import pytest

from conftest import HH_HARMLESS_TEST, QUICKSTART, TINY_MODEL
from rm.config import load_config
from rm.training.run import main

pytestmark = pytest.mark.skipif(not HH_HARMLESS_TEST.is_file(), reason="needs the shared HH file")

# 240 + 60 pairs of the real HH file (its 4 empty answers skipped), a max_length that truncates and drops.
RUN = [f"data.source={HH_HARMLESS_TEST}", "data.on_bad_record=skip", "data.eval_split=", "data.eval_fraction=0.2"]
RUN += ["data.max_train_pairs=240", "data.max_eval_pairs=60", "collator.max_length=96", *TINY_MODEL]
RUN += ["train.max_steps=6", "train.batch_size=8", "train.report_to=[]", "export.enabled=false"]
RUN += ["train.num_threads=1", "train.log_steps=2"]


def run(out: Path, *extra: str) -> dict:
    result = main(load_config(QUICKSTART, RUN + [f"output_dir={out}", *extra]))
    result["train"].pop("seconds")
    return result


def files(out: Path) -> dict[str, str]:
    names = ["data_report.json", "skipped.jsonl", "tokenizer/tokenizer.json", "train_log.jsonl"]
    return {name: (out / name).read_text() for name in names}


@pytest.mark.slow
def test_a_cached_run_is_the_run_that_tokenized(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rm")
    cache_dir = f"data.cache_dir={tmp_path / 'cache'}"
    plain = run(tmp_path / "plain", "data.cache=false")
    assert not (tmp_path / "cache").exists()
    built = run(tmp_path / "built", cache_dir)
    assert "data: cache written to" in caplog.text and "from cache" not in caplog.text
    caplog.clear()
    reused = run(tmp_path / "reused", cache_dir)
    assert "tokenizer: from cache" in caplog.text and "data: tokenized pairs from cache" in caplog.text
    assert "cache written" not in caplog.text
    assert built == plain and reused == plain
    assert files(tmp_path / "built") == files(tmp_path / "plain") == files(tmp_path / "reused")
    assert json.loads(files(tmp_path / "plain")["data_report.json"])["skipped"] == {"empty_response": 4}


@pytest.mark.slow
def test_two_processes_tokenize_once(launched):
    out = launched(2).run("tokenize_once")  # `rm train` RUN on 2 processes, in the shared launch (tests/launched/)
    cache_dir = launched(2).out("tokenize_once") / "cache"
    assert sorted(p.name for p in out.glob("encoded-*")) == ["encoded-0"]  # rank 1 read what rank 0 stored
    assert len(list(cache_dir.glob("data-*"))) == 1 and len(list(cache_dir.glob("tokenizer-*"))) == 1
    assert (
        json.loads((out / "eval.json").read_text())["overall"]["n"]
        == 60 - json.loads((out / "data_report.json").read_text())["encoding"]["eval"]["dropped_too_long"]
    )
