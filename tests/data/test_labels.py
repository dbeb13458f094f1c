"""The label schema (rm/data/labels.py): rm's own labels are declared with the columns, batch tensors, gathered
columns and eval.json blocks they really have; a registered label is refused under a name already taken or with
no single source; a response label's value is one number per response, else the record is bad; registering one
changes the cache key."""

import math

import pytest
import torch

from rm.collate.padded import PaddedCollator
from rm.config import RunConfig
from rm.data.labels import BUILTIN, Label, checked, fingerprint, register, unregister
from rm.errors import ConfigError, RecordError
from rm.evaluation.gather import LINKED, arranged, keep_once
from rm.evaluation.summary import EVAL_KEYS, summarize_groups
from rm.tokens.prepare import data_key
from rm.tokens.store import OPTIONAL, SCHEMA, EncodedGroup


def test_rms_own_labels_are_declared_with_their_real_columns_and_tensors():
    columns = set(SCHEMA.names) | set(OPTIONAL)
    nan = math.nan
    groups = [
        EncodedGroup(prompt_ids=[1], response_ids=[[2], [3]], rank=[0, 0], subset_id=0, margin=1.0, target=0.5,
                     attributes=[1.0, nan]),
        EncodedGroup(prompt_ids=[4], response_ids=[[5], [6], [7]], rank=[0, 1, 2], subset_id=0, scores=[3.0, 2.0, 1.0],
                     attributes=[1.0, 2.0, 3.0]),
    ]  # fmt: skip
    batch = PaddedCollator(0)(groups)
    # What eval gathers, each group once (rm/evaluation/gather.py's `arranged` of one kept pair with every column).
    kept = {"groups": torch.tensor([[0, 0, 0, 7]]), "responses": torch.tensor([[7, 0, 0], [7, 1, 1]]),
            "reward": torch.tensor([1.0, 0.5]), "pairs": torch.tensor([[7, 0, 1, 0]]),
            "pair_target": torch.tensor([0.7]), "attribute_outputs": torch.zeros(2, 1),
            "attribute_scores": torch.ones(2, 1)}  # fmt: skip
    gathered = arranged(keep_once(kept, LINKED))
    blocks = set(EVAL_KEYS) | {f"overall.{k}" for k in summarize_groups(gathered, ["s"])["overall"]}
    for label in BUILTIN:
        for column in label.column.split(", "):
            assert column in columns, (label.name, column)
        for tensor in label.tensor.split(", "):
            assert tensor.split(" ")[0] in batch, (label.name, tensor)
        for name in filter(None, label.gathered.split(", ")):
            assert name in gathered, (label.name, name)
        assert set(label.metrics) <= blocks, label.name


def test_a_name_taken_or_a_label_without_one_source_is_refused():
    with pytest.raises(ConfigError, match="label 'margin': the name is taken"):
        register(Label(name="margin", level="group", fields="x", read=lambda r, i: None))
    with pytest.raises(ConfigError, match="label 'better': the name is taken"):
        register(Label(name="better", level="group", fields="x", read=lambda r, i: None))
    with pytest.raises(ConfigError, match="exactly one of read"):
        register(Label(name="both", level="group", fields="x", read=lambda r, i: 1, derive=lambda p, r: 1))
    once = Label(name="once", level="group", fields="x", read=lambda r, i: None)
    try:
        assert register(once) is once and register(once) is once  # the same declaration again: a no-op
        with pytest.raises(ConfigError, match="label 'once': the name is taken"):
            register(Label(name="once", level="response", fields="y", read=lambda r, i: None))
    finally:
        unregister("once")


def test_a_response_label_needs_one_number_per_response():
    from rm.data.formats.pair import Pair

    label = Label(name="per_response", level="response", fields="a list", read=lambda r, i: None)
    pair = Pair("p", "a", "b", "s")
    assert checked(label, [1, 2.5], pair) == (1.0, 2.5)
    for bad in ([1], [1, 2, 3], "12", [1, float("inf")], [True, 1]):
        with pytest.raises(RecordError, match="label 'per_response'"):
            checked(label, bad, pair)


def test_registering_a_label_changes_the_cache_key_and_forgetting_it_restores_it(tokenizer):
    cfg = RunConfig()
    before = data_key(cfg, tokenizer)
    assert fingerprint() == []
    register(Label(name="keyed", level="group", fields="x", read=lambda r, i: None))
    try:
        assert fingerprint() == [("keyed", "group", 1)] and data_key(cfg, tokenizer) != before
    finally:
        unregister("keyed")
    assert data_key(cfg, tokenizer) == before


def test_the_docs_table_of_rms_own_labels_is_their_declarations():
    from conftest import REPO

    rows = ["| label | level | read from | Arrow column | batch tensor | gathered | eval.json |"]
    rows.append("| --- | --- | --- | --- | --- | --- | --- |")
    for b in BUILTIN:
        cells = [f"`{b.name}`", b.level, b.fields, b.column, b.tensor, b.gathered or "-", ", ".join(b.metrics) or "-"]
        rows.append("| " + " | ".join(cells) + " |")
    assert "\n".join(rows) + "\n" in (REPO / "docs" / "how-it-works.md").read_text()
