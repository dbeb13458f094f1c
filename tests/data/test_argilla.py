"""The Japanese Argilla export (hironow/test-hh-rlhf-12k-ja) in the exact form its card shows.

tests/fixtures/argilla_ja.jsonl holds six records written for these tests (see the comments in the
expected values below); each has every column of the card's `datasets` example.
"""

import json

import pytest

from conftest import REPO
from rm.config import ArgillaConfig, DataConfig
from rm.data.data_report import DataReport
from rm.data.formats.argilla import parse_turns
from rm.data.load import holdout_split, load_pairs, subset_counts
from rm.tokens.encode import encode_pairs
from rm.tokens.tokenizer import train_bpe

FIXTURE = REPO / "tests" / "fixtures" / "argilla_ja.jsonl"
CARD_COLUMNS = {
    "chosen",
    "chosen_rating",
    "chosen_rating-suggestion",
    "chosen_rating-suggestion-metadata",
    "external_id",
    "metadata",
    "modify_chosen",
    "modify_chosen-suggestion",
    "modify_chosen-suggestion-metadata",
    "modify_rejected",
    "modify_rejected-suggestion",
    "modify_rejected-suggestion-metadata",
    "rejected",
    "rejected_rating",
    "rejected_rating-suggestion",
    "rejected_rating-suggestion-metadata",
}


def load(report=None, **options):
    cfg = DataConfig(argilla=ArgillaConfig(**options))
    return load_pairs(str(FIXTURE), "train", [], cfg, report=report)


def test_fixture_has_exactly_the_cards_columns_and_string_metadata():
    for line in FIXTURE.read_text().splitlines():
        record = json.loads(line)
        assert set(record) == CARD_COLUMNS
        assert isinstance(record["metadata"], str) and record["chosen"].startswith("user: ")


def test_turns_keep_newlines_inside_content_and_drop_only_the_format_newline():
    text = "user: 手順は？\nassistant: 一、切る\n二、煮る\nuser: ありがとう\nassistant: どういたしまして\n"
    assert [(m.role, m.content) for m in parse_turns(text, "chosen")] == [
        ("user", "手順は？"),
        ("assistant", "一、切る\n二、煮る"),
        ("user", "ありがとう"),
        ("assistant", "どういたしまして"),
    ]


def test_records_become_pairs_with_subsets_from_metadata_source():
    report = DataReport()
    pairs = load(report)
    assert subset_counts(pairs) == {
        "harmless-base": 2,
        "helpful-base": 2,
        "helpful-online": 1,
        "helpful-rejection-sampled": 1,
    }
    curry = pairs[1]  # record 2: two user turns; the answer has newlines of its own
    assert curry.prompt == (
        "\n\nHuman: カレーの作り方を教えて\n\nAssistant: 材料は何がありますか？"
        "\n\nHuman: じゃがいもと玉ねぎと肉\n\nAssistant:"
    )
    assert curry.chosen == " 手順です。\n1. 野菜と肉を切る\n2. 炒めて煮込む\n3. ルーを入れる"
    assert curry.rejected == " お店で買ってください。"
    assert [p.parts_early for p in pairs] == [False, False, False, False, False, True]  # record 6 parts early
    assert all(p.margin is None for p in pairs)  # every option is off by default
    assert report.notes["argilla"] == {
        "records": 6, "rated_on_both_sides": 3, "responses_not_submitted": 1,
        "annotators_per_response": {"0": 5, "1": 6, "2": 1},  # read whatever the head (test_argilla_ratings.py)
    }  # fmt: skip


def test_margin_from_ratings_is_mean_chosen_minus_mean_rejected_where_both_are_rated():
    """Record 2: (4+5)/2 - 2 = 2.5. Record 3: 2 - 3 = -1. Record 4: 3 - 3 = 0 (its discarded rating
    of 1 does not count; counted it would give (3+1)/2 - 3 = -1). Records 1, 5, 6 lack a side: None."""
    report = DataReport()
    pairs = load(report, margin_from_ratings=True)
    assert [p.margin for p in pairs] == [None, 2.5, -1.0, 0.0, None, None]
    assert report.notes["argilla"]["margins_from_ratings"] == 3


def test_dropping_disagreements_drops_ties_and_reversals_and_counts_them():
    report = DataReport()
    pairs = load(report, drop_rating_disagreements=True, margin_from_ratings=True)
    assert [p.origin.rsplit(":", 1)[1] for p in pairs] == ["1", "2", "5", "6"]  # 3 (2 < 3) and 4 (3 = 3) go
    assert report.notes["argilla"]["dropped_rating_disagreements"] == 2
    assert report.notes["argilla"]["margins_from_ratings"] == 1


def test_edits_add_pairs_of_the_edited_answer_over_the_original_rejected():
    report = DataReport()
    pairs = load(report, pairs_from_edits=True)
    added = [p for p in pairs if "(edit: " in p.origin]
    assert [(p.origin.split("(edit: ")[1], p.subset) for p in added] == [
        ("modify_chosen[0])", "helpful-base"),
        ("modify_rejected[0])", "helpful-online"),
    ]
    assert added[0].prompt == pairs[1].prompt and added[0].rejected == pairs[1].rejected
    edited = " 手順です。\n1. 野菜と肉を一口大に切る\n2. 炒めてから水で二十分煮込む\n3. 火を止めてルーを溶かす"
    assert added[0].chosen == edited
    assert added[1].chosen == " 新幹線なら約二時間半、歩くと一週間ほどかかります。"
    assert added[1].rejected == " 歩くと一週間ほどかかります。"
    # Record 6's edit repeats chosen's answer: no new pair, but counted.
    assert report.notes["argilla"]["edit_pairs_added"] == 2
    assert report.notes["argilla"]["edits_empty_or_unchanged"] == 1


@pytest.mark.parametrize("seed", range(5))
def test_a_hold_out_keeps_an_edit_pair_with_its_record(seed):
    pairs = load(pairs_from_edits=True)
    train, held = holdout_split(pairs, 0.5, seed)
    for side in (train, held):
        records = {p.origin.split(" (edit: ")[0] for p in side}
        assert all(p.origin.split(" (edit: ")[0] in records for p in side)
        other = held if side is train else train
        assert not records & {p.origin.split(" (edit: ")[0] for p in other}


@pytest.fixture(scope="module")
def ja_tokenizer():
    texts = [t for p in load(pairs_from_edits=True) for t in (p.prompt, p.chosen, p.rejected)]
    return train_bpe(texts, vocab_size=400)


def test_japanese_splits_without_whitespace_assumptions(ja_tokenizer):
    """Prompt and responses tokenized apart give exactly the ids of the whole text, and decode back to it."""
    for p in load(pairs_from_edits=True):
        for response in (p.chosen, p.rejected):
            apart = ja_tokenizer(p.prompt, add_special_tokens=False)["input_ids"]
            apart += ja_tokenizer(response, add_special_tokens=False)["input_ids"]
            assert apart == ja_tokenizer(p.prompt + response, add_special_tokens=False)["input_ids"]
            assert ja_tokenizer.decode(apart) == p.prompt + response


def test_a_long_japanese_prompt_is_cut_at_a_turn_boundary(ja_tokenizer):
    long = load()[4]  # record 5: seven user turns
    ids = lambda text: ja_tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    last_two = "\n\nHuman: 質問5：数字5を覚えて\n\nAssistant: はい、5を覚えました。"
    last_two += "\n\nHuman: 最初の数字は？\n\nAssistant:"
    assert long.prompt.endswith(last_two)
    room = len(ids(last_two)) + max(len(ids(long.chosen)), len(ids(long.rejected)))
    (encoded,), report = encode_pairs([long], ja_tokenizer, room, [long.subset])
    assert ja_tokenizer.decode(encoded.prompt_ids) == last_two
    assert encoded.chosen_ids.tolist() == ids(" 0です。") and encoded.rejected_ids.tolist() == ids(" 5です。")
    assert (report.prompt_truncated, report.prompt_cut_inside_turn, report.too_long) == (1, 0, [])


def test_by_hub_name_with_ratings_in_either_form_datasets_returns(monkeypatch):
    """`datasets` gives a list of dicts for `[{...}]` features and a dict of lists for `Sequence({...})`."""
    import datasets

    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    records[1]["chosen_rating"] = {"user_id": ["a", "b"], "value": [4, 5], "status": ["submitted", "submitted"]}
    calls = []

    def fake_load_dataset(name, data_dir=None, split=None):
        calls.append((name, data_dir, split))
        return records

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    cfg = DataConfig(argilla=ArgillaConfig(margin_from_ratings=True))
    pairs = load_pairs("hironow/test-hh-rlhf-12k-ja", "train", ["helpful-base"], cfg)
    assert calls == [("hironow/test-hh-rlhf-12k-ja", None, "train")]
    assert [(p.origin, p.margin) for p in pairs] == [
        ("hironow/test-hh-rlhf-12k-ja[train] row 1", 2.5),
        ("hironow/test-hh-rlhf-12k-ja[train] row 5", None),
    ]
