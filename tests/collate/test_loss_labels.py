"""What the loss makes of the cached splits (rm/collate/loss_labels.py): a group whose merged records order its
answers in a cycle is a bad record for Plackett-Luce only, decided after the cache, with the message, the skip
and the count loading gave it before; the cache key does not change with the loss."""

import json
import re

import pytest

from rm.collate.loss_labels import for_loss
from rm.config import DataConfig, RunConfig
from rm.config.loss_config import LossConfig
from rm.data.load import load_data
from rm.errors import DataError
from rm.tokens.prepare import data_key, encoded


@pytest.fixture
def cyclic(tmp_path):
    """f.jsonl: a over b, b over c, c over a (a cycle) and c over d for one prompt; then nine plain pairs."""
    rows = [(" a", " b"), (" b", " c"), (" c", " a"), (" c", " d")]
    records = [{"prompt": "P", "chosen": c, "rejected": r} for c, r in rows]
    records += [{"prompt": f"Q{i}", "chosen": " yes", "rejected": " no"} for i in range(9)]
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def prepared(path, tokenizer, loss, **data):
    run = RunConfig(data=DataConfig(source=str(path), eval_split="", group_by_prompt=True, **data), loss=loss)
    prepared = encoded(run, load_data(run.data, path.parent), tokenizer, False)
    for_loss(run, prepared)
    return run, prepared


def test_a_cycle_stops_plackett_luce_with_the_records_named(cyclic, tokenizer):
    lines = r"f.jsonl:1\+2\+3\+4: .*f.jsonl:1, .*f.jsonl:2, .*f.jsonl:3 order this prompt's answers in a cycle"
    with pytest.raises(DataError, match=lines + r".*plackett_luce has no ranking.*on_bad_record=skip"):
        prepared(cyclic, tokenizer, LossConfig(type="plackett_luce"))


def test_skipped_it_leaves_the_split_counted_and_pairwise_keeps_it(cyclic, tokenizer):
    _, pairwise = prepared(cyclic, tokenizer, LossConfig())
    groups = [g for split in (pairwise.train, pairwise.eval) for g in split]
    assert sorted(len(g.response_ids) for g in groups) == [2] * 9 + [4]
    assert pairwise.report.notes["grouped"]["groups_with_cycles"] == 1 and not pairwise.report.skipped

    _, listwise = prepared(cyclic, tokenizer, LossConfig(type="plackett_luce"), on_bad_record="skip")
    kept = [g for split in (listwise.train, listwise.eval) for g in split]
    assert sorted(len(g.response_ids) for g in kept) == [2] * 9
    assert listwise.report.skipped_counts() == {"contradictory_order": 1}
    assert re.search(r"f.jsonl:1\+2\+3\+4$", listwise.report.skipped[0].origin)
    for split in (listwise.train, listwise.eval):  # indices renumbered: each group's position in its split
        assert [g.index for g in split] == list(range(len(split)))


def test_the_key_is_the_same_whatever_the_loss(cyclic, tokenizer):
    run = RunConfig(data=DataConfig(source=str(cyclic), group_by_prompt=True))
    before = data_key(run, tokenizer)
    for change in (("type", "plackett_luce"), ("strength", "soft"), ("strength_max", 3.0), ("ties", "davidson")):
        setattr(run.loss, *change)
        assert data_key(run, tokenizer) == before, change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("loss.strength=soft", "loss.strength=soft: no pair has a strength"),
        ("model.head.attributes=[usefulness]", "model.head.attributes: 'usefulness' is scored in no record"),
    ],
)
def test_a_loss_or_head_the_data_cannot_feed_stops_before_anything_is_tokenized(cyclic, tokenizer, change, message):
    """The check training passes to prepare_data (rm/model/objective.py:check_consumed) runs on the loaded data's
    label counts: the run stops in one line and no cache entry is written."""
    from rm.config import load_config
    from rm.model.objective import check_consumed
    from rm.tokens.prepare import prepare_data

    cache = cyclic.parent / "cache"
    cfg = load_config(None, [f"data.source={cyclic}", "data.eval_split=", f"data.cache_dir={cache}", change,
                             f"output_dir={cyclic.parent / 'run'}"])  # fmt: skip
    with pytest.raises(DataError, match=re.escape(message)) as info:
        prepare_data(cfg, tokenizer, require=lambda counts: check_consumed(cfg, counts))
    assert "\n" not in str(info.value) and not list(cache.glob("data-*"))
