"""K-response record formats (rm/data/formats/ranked.py) from records written here in each dataset's published
field names: the group's text as the HH renderer writes it, its ranks, and one named RecordError per bad record;
how records are told apart (parse.py), pairwise ties, and every fixture and bad record through `load_pairs`."""

import json
import re

import pytest

from conftest import REPO
from rm.config import DataConfig
from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.data.formats.group import Group, pairs_of, rank_of, ranks_from_scores, responses_of, scores_of
from rm.data.formats.pair import Pair, ParseContext
from rm.data.formats.parse import FORMATS, PARSERS, detect_format, parse_record
from rm.data.formats.ranked import parse_nectar, parse_responses, parse_rewardbench2, parse_ultrafeedback
from rm.data.load import load_pairs
from rm.errors import DataError, RecordError

FIXTURES = REPO / "tests" / "fixtures"


def ctx(subset="default", score_field=""):
    return ParseContext(DataReport(), Renderer(), subset=subset, score_field=score_field)  # no tokenizer: HH text


def ultrafeedback(scores, helpfulness):
    return {
        "source": "evol_instruct",
        "instruction": "Name a prime number.",
        "models": ["m0", "m1", "m2", "m3"],
        "completions": [
            {
                "model": f"m{k}",
                "response": f"answer {k}",
                "overall_score": s,
                "fine-grained_score": 3.0,
                "annotations": {"helpfulness": {"Rating": h, "Rationale": "..."}, "honesty": {"Rating": "5"}},
                "custom_system_prompt": "",
                "principle": "helpfulness",
                "critique": "...",
            }
            for k, (s, h) in enumerate(zip(scores, helpfulness, strict=True))
        ],
    }


def test_ultrafeedback_orders_by_overall_score_and_ties_equal_scores():
    group = parse_ultrafeedback(ultrafeedback([7.5, 3, 7.5, 6], ["4", "2", "5", "N/A"]), "f:1", ctx("uf"))
    assert group.prompt == "\n\nHuman: Name a prime number.\n\nAssistant:"
    assert group.responses == (" answer 0", " answer 1", " answer 2", " answer 3")
    assert group.rank == (0, 2, 0, 1) and group.scores == (7.5, 3.0, 7.5, 6.0)
    assert group.subset == "uf" and group.origin == "f:1"


def test_ultrafeedback_reads_an_aspect_rating_and_leaves_unrated_completions_out():
    group = parse_ultrafeedback(ultrafeedback([1, 2, 3, 4], ["4", "2", "5", "N/A"]), "f:2", ctx("uf", "helpfulness"))
    assert group.responses == (" answer 0", " answer 1", " answer 2")  # answer 3's helpfulness is N/A
    assert group.rank == (1, 2, 0)
    with pytest.raises(RecordError, match=r"completions\[0\].annotations.helpfulness") as bad:
        parse_ultrafeedback(ultrafeedback([1, 2], ["four", "2"]), "f:3", ctx("uf", "helpfulness"))
    assert bad.value.reason == "not_a_number"
    with pytest.raises(RecordError, match="no such score") as missing:
        parse_ultrafeedback(ultrafeedback([1, 2], ["4", "2"]), "f:4", ctx("uf", "harmlessness"))
    assert missing.value.reason == "missing_field"


def test_nectar_ranks_from_one_and_answers_follow_the_hh_prompt_after_a_space():
    record = {
        "prompt": "\n\nHuman: What is 2+2?\n\nAssistant:",
        "answers": [{"answer": "4", "model": "a", "rank": 2}, {"answer": "Four.", "model": "b", "rank": 1},
                    {"answer": " 5", "model": "c", "rank": 3}],
        "turns": 1, "num_responses": 3, "source": ["x"], "good_natured": True,
    }  # fmt: skip
    group = parse_nectar(record, "n:1", ctx("nectar"))
    assert group.prompt == "\n\nHuman: What is 2+2?\n\nAssistant:"
    assert group.responses == (" 4", " Four.", " 5") and group.rank == (1, 0, 2)
    record["answers"][2]["rank"] = 1
    with pytest.raises(RecordError, match="rank 1 to more than one") as dup:
        parse_nectar(record, "n:2", ctx("nectar"))
    assert dup.value.reason == "duplicate_rank"
    del record["answers"][2]["rank"]
    with pytest.raises(RecordError, match=r"answers\[2\].rank") as missing:
        parse_nectar(record, "n:3", ctx("nectar"))
    assert missing.value.reason == "missing_rank"
    with pytest.raises(RecordError, match="must end on"):
        parse_nectar({**record, "prompt": "What is 2+2?"}, "n:4", ctx("nectar"))


def test_rewardbench2_puts_every_chosen_over_every_rejected():
    record = {"id": "1", "prompt": "Say hi.", "chosen": ["Hi!"], "rejected": ["Bye.", "No.", "..."],
              "num_correct": 1, "num_incorrect": 3, "total_completions": 4, "models": [],
              "subset": "Focus"}  # fmt: skip
    group = parse_rewardbench2(record, "rb:1", ctx())
    assert group.rank == (0, 1, 1, 1) and group.subset == "Focus"
    assert group.responses == (" Hi!", " Bye.", " No.", " ...")
    with pytest.raises(RecordError, match="at least one chosen"):
        parse_rewardbench2({**record, "chosen": []}, "rb:2", ctx())


def test_generic_responses_take_scores_or_ranks_text_or_messages():
    scored = {"prompt": "Q?", "responses": [{"text": "a", "score": 0.5}, {"text": "b", "score": 2}]}
    group = parse_responses(scored, "g:1", ctx())
    assert group.rank == (1, 0) and group.scores == (0.5, 2.0)
    ranked = {
        "prompt": [{"role": "user", "content": "Q?"}],
        "responses": [{"messages": [{"role": "assistant", "content": "a"}], "rank": 2},
                      {"messages": [{"role": "assistant", "content": "b"}], "rank": 1}],
    }  # fmt: skip
    group = parse_responses(ranked, "g:2", ctx())
    assert group.prompt == "\n\nHuman: Q?\n\nAssistant:" and group.responses == (" a", " b") and group.rank == (1, 0)
    mixed = {"prompt": "Q?", "responses": [{"text": "a", "score": 1}, {"text": "b", "rank": 1}]}
    with pytest.raises(RecordError, match="give one kind"):
        parse_responses(mixed, "g:3", ctx())


@pytest.mark.parametrize(
    ("responses", "reason", "names"),
    [
        ([{"text": "a", "score": 1}], "too_few_responses", "1 response"),
        ([{"text": "a", "score": 1}, {"text": "b", "score": 1}], "all_tied", "same score"),
        ([{"text": "a", "score": 1}, {"text": "a", "score": 2}], "duplicate_response", r"responses\[1\]"),
        ([{"text": "a", "score": 1}, {"text": " ", "score": 2}], "empty_response", r"responses\[1\]"),
        ([{"text": "a", "score": "high"}, {"text": "b", "score": 2}], "not_a_number", r"responses\[0\].score"),
        ([{"text": "a", "rank": 1}, {"text": "b", "rank": 1}], "duplicate_rank", "rank 1"),
        ([{"text": "a"}, {"text": "b", "score": 2}], "missing_field", r"responses\[0\]"),
    ],
)
def test_bad_groups_are_one_named_record_error(responses, reason, names):
    with pytest.raises(RecordError, match=names) as bad:
        parse_responses({"prompt": "Q?", "responses": responses}, "g:9", ctx())
    assert bad.value.reason == reason


def test_scores_become_dense_ranks_highest_first():
    assert ranks_from_scores([3, 5, 3, 1]) == (1, 0, 1, 2)
    assert ranks_from_scores([0.1, 0.2]) == (1, 0)


def test_nectar_takes_whole_number_float_ranks_and_refuses_others():
    answers = [{"answer": "a", "model": "m", "rank": 2.0}, {"answer": "b", "model": "m", "rank": 1.0}]
    record = {"prompt": "\n\nHuman: Q?\n\nAssistant: ", "answers": answers}
    assert parse_nectar(record, "n:1", ctx()).rank == (1, 0)  # a Parquet float column; the trailing space goes
    answers[0]["rank"] = 1.5
    with pytest.raises(RecordError, match=r"answers\[0\].rank' must be a whole number") as bad:
        parse_nectar(record, "n:2", ctx())
    assert bad.value.reason == "not_a_number" and bad.value.field == "answers[0].rank"


def dense_ranks(values, higher_is_better=True):
    """Reference: a response's rank is how many distinct values are better than its own."""
    better = (lambda a, b: a > b) if higher_is_better else (lambda a, b: a < b)
    return tuple(len({w for w in values if better(w, v)}) for v in values)


def fixture_records(name):
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def test_every_format_is_told_from_its_fields_and_pairwise_detection_is_unchanged():
    assert {detect_format(r) for r in fixture_records("ultrafeedback.jsonl")} == {"ultrafeedback"}
    assert {detect_format(r) for r in fixture_records("nectar.jsonl")} == {"nectar"}
    assert {detect_format(r) for r in fixture_records("rewardbench2.jsonl")} == {"rewardbench2"}
    assert {detect_format(r) for r in fixture_records("responses.jsonl")} == {"responses"}
    assert {detect_format(r) for r in fixture_records("helpsteer2_rows.jsonl")} == {"rows"}
    # a record with `chosen` is pairwise whatever else it holds; lists of messages are conversations
    assert detect_format({"prompt": "p", "response": "r", "chosen": "c", "rejected": "d"}) == "prompt"
    messages = [{"role": "assistant", "content": "a"}]
    assert detect_format({"prompt": "p", "chosen": messages, "rejected": messages}) == "conversation"
    assert detect_format({"chosen": [], "rejected": []}) == "conversation"
    assert detect_format({"prompt": "p", "chosen": ["a"], "rejected": []}) == "rewardbench2"


def test_every_format_has_a_parser_and_a_config_choice():
    from rm.config.checks import CHOICES

    assert set(PARSERS) | {"red-team"} == set(FORMATS)
    assert set(CHOICES["data.format"]) == {"auto", "steps", *FORMATS}  # steps: a file of its own (rm/data/steps/)


@pytest.mark.parametrize(
    ("fmt", "record"),
    [
        ("prompt", {"prompt": "Q?", "chosen": " a", "rejected": " b"}),
        ("hh", {"chosen": "\n\nHuman: Q?\n\nAssistant: a", "rejected": "\n\nHuman: Q?\n\nAssistant: b"}),
        ("conversation", {"prompt": "Q?", "chosen": [{"role": "assistant", "content": "a"}],
                          "rejected": [{"role": "assistant", "content": "b"}]}),
    ],
)  # fmt: skip
def test_pairwise_records_say_a_tie_by_flag_or_equal_scores(fmt, record):
    def parse(**more):
        return parse_record(fmt, {**record, **more}, "t:1", ctx())[0]

    assert not parse().tie and rank_of(parse()) == (0, 1)
    assert parse(tie=True).tie and rank_of(parse(tie=True)) == (0, 0)
    assert parse(chosen_score=3, rejected_score="3.0").tie
    assert not parse(chosen_score=4, rejected_score=3).tie and not parse(tie=False, chosen_score=3).tie
    with pytest.raises(RecordError, match="field 'tie' is true but chosen_score 4 and rejected_score 3") as bad:
        parse(tie=True, chosen_score=4, rejected_score=3)
    assert bad.value.reason == "tie_conflict" and bad.value.field == "tie"
    with pytest.raises(RecordError, match="field 'tie' must be true or false") as bad:
        parse(tie="yes")
    assert bad.value.field == "tie"
    with pytest.raises(RecordError, match="rejected_score"):
        parse(chosen_score=3, rejected_score="high")


def test_a_tied_pair_still_needs_two_different_answers():
    with pytest.raises(RecordError, match="identical"):
        parse_record("prompt", {"prompt": "Q?", "chosen": " a", "rejected": " a", "tie": True}, "t:1", ctx())


def test_pairs_and_groups_read_alike():
    pair = Pair("P", " a", " b", "s", origin="f:1")
    group = Group("P", (" a", " b", " c"), (1, 0, 1), "s", origin="f:2", scores=(1.0, 2.0, 1.0))
    merged = Group("P", (" a", " b"), (0, 1), "s", origin="f:3", pairs=((0, 1, False), (1, 0, True)))
    assert responses_of(pair) == (" a", " b") and responses_of(group) == (" a", " b", " c")
    assert rank_of(pair) == (0, 1) and rank_of(group) == (1, 0, 1)
    assert scores_of(pair) is None and scores_of(group) == (1.0, 2.0, 1.0)
    assert pairs_of(pair) is None and pairs_of(group) is None and pairs_of(merged) == ((0, 1, False), (1, 0, True))


def expected_fixture_groups(score_field):
    """(prompt start, K, rank, subset) per record of each fixture, ranks worked out from the scores in the file."""
    uf = fixture_records("ultrafeedback.jsonl")

    def uf_scores(record):
        if score_field == "overall_score":
            values = [c["overall_score"] for c in record["completions"]]
        else:
            values = [c["annotations"][score_field]["Rating"] for c in record["completions"]]
        return [float(v) for v in values if v != "N/A"]

    nectar = [[a["rank"] for a in r["answers"]] for r in fixture_records("nectar.jsonl")]
    rb2 = [
        ([0] * len(r["chosen"]) + [1] * len(r["rejected"]), r["subset"]) for r in fixture_records("rewardbench2.jsonl")
    ]
    gen = fixture_records("responses.jsonl")
    return {
        "ultrafeedback.jsonl": [dense_ranks(uf_scores(r)) for r in uf],
        "nectar.jsonl": [dense_ranks(places, higher_is_better=False) for places in nectar],
        "rewardbench2.jsonl": [tuple(rank) for rank, _ in rb2],
        "responses.jsonl": [dense_ranks([x["score"] for x in gen[0]["responses"]]),
                            dense_ranks([x["rank"] for x in gen[1]["responses"]], higher_is_better=False)],
    }  # fmt: skip


@pytest.mark.parametrize("score_field", ["", "helpfulness"])
def test_every_k_response_fixture_loads_as_groups(score_field):
    field = score_field or "overall_score"
    for name, ranks in expected_fixture_groups(field).items():
        cfg = DataConfig(format="auto", score_field=score_field if name == "ultrafeedback.jsonl" else "")
        groups = load_pairs(str(FIXTURES / name), "train", [], cfg)
        assert all(isinstance(g, Group) for g in groups), name
        assert [g.rank for g in groups] == ranks, name
        assert [g.origin for g in groups] == [f"{FIXTURES / name}:{k + 1}" for k in range(len(ranks))]
        for g in groups:
            assert g.prompt.startswith("\n\n") and g.prompt.endswith("\n\nAssistant:")
    rb2 = load_pairs(str(FIXTURES / "rewardbench2.jsonl"), "train", [], DataConfig())
    assert [g.subset for g in rb2] == ["Factuality", "Precise IF"]
    uf = load_pairs(str(FIXTURES / "ultrafeedback.jsonl"), "train", [], DataConfig())
    assert uf[1].responses == (" Yes.", " No, 17 is even.", " Yes: 17 has no divisors other than 1 and itself.")
    assert uf[0].subset == "ultrafeedback" and uf[1].scores == (7.0, 2.0, 9.0)  # "N/A" left out
    generic = load_pairs(str(FIXTURES / "responses.jsonl"), "train", [], DataConfig())
    assert (
        generic[1].prompt
        == "\n\nSystem: Answer briefly.\n\nHuman: What colour is the sky on a clear day?\n\nAssistant:"
    )


def uf_record(scores, texts=None):
    texts = texts or [f"answer {k}" for k in range(len(scores))]
    return {
        "instruction": "Q?",
        "completions": [{"response": t, "overall_score": s} for t, s in zip(texts, scores, strict=True)],
    }


def nectar_record(places, texts=None):
    texts = texts or [f"answer {k}" for k in range(len(places))]
    answers = [
        {"answer": t, "model": "m", **({} if p is None else {"rank": p})} for t, p in zip(texts, places, strict=True)
    ]
    return {"prompt": "\n\nHuman: Q?\n\nAssistant:", "answers": answers}


def gen_record(kind, values, texts=None):
    texts = texts or [f"answer {k}" for k in range(len(values))]
    return {"prompt": "Q?", "responses": [{"text": t, kind: v} for t, v in zip(texts, values, strict=True)]}


BAD_GROUPS = [  # (good record, bad record, reason, the field as the message names it)
    (uf_record([2, 1]), uf_record([5, "N/A"]), "too_few_responses", "'completions' has 1 response"),
    (uf_record([2, 1]), uf_record([5, 5.0]), "all_tied", "completions[].overall_score"),
    (uf_record([2, 1]), uf_record(["high", 5]), "not_a_number", "completions[0].overall_score"),
    (uf_record([2, 1]), uf_record([2, 1], ["same", "same"]), "duplicate_response", "completions[1].response"),
    (uf_record([2, 1]), {"instruction": "Q?", "completions": [{"response": "a"}]}, "missing_field",
     "completions[0].overall_score"),
    (nectar_record([1, 2]), nectar_record([1]), "too_few_responses", "'answers' has 1 response"),
    (nectar_record([1, 2]), nectar_record([1, 1]), "duplicate_rank", "answers[].rank"),
    (nectar_record([1, 2]), nectar_record([1, None]), "missing_rank", "answers[1].rank"),
    (nectar_record([1, 2]), nectar_record([1, "first"]), "not_a_number", "answers[1].rank"),
    (nectar_record([1, 2]), nectar_record([1, 2], ["same", "same"]), "duplicate_response", "answers[1].answer"),
    ({"prompt": "Q?", "chosen": ["a"], "rejected": ["b"]}, {"prompt": "Q?", "chosen": [], "rejected": ["b"]},
     "too_few_responses", "'chosen' is empty"),
    ({"prompt": "Q?", "chosen": ["a"], "rejected": ["b"]}, {"prompt": "Q?", "chosen": ["a"], "rejected": ["b", "a"]},
     "duplicate_response", "rejected[1]"),
    (gen_record("score", [2, 1]), gen_record("score", [1]), "too_few_responses", "'responses' has 1 response"),
    (gen_record("score", [2, 1]), gen_record("score", [1, 1]), "all_tied", "responses[].score"),
    (gen_record("score", [2, 1]), gen_record("rank", [1, 1]), "duplicate_rank", "responses[].rank"),
    (gen_record("score", [2, 1]), gen_record("rank", [1, None]), "missing_rank", "responses[1].rank"),
    (gen_record("score", [2, 1]), gen_record("score", [1, "x"]), "not_a_number", "responses[1].score"),
    (gen_record("score", [2, 1]), gen_record("score", [2, 1], ["a", "a"]), "duplicate_response", "responses[1]"),
]  # fmt: skip


@pytest.mark.parametrize(("good", "bad", "reason", "field"), BAD_GROUPS)
def test_every_bad_group_stops_at_its_line_and_field_or_is_counted_under_skip(tmp_path, good, bad, reason, field):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:2: ") + ".*" + re.escape(field)) as stop:
        load_pairs(str(path), "train", [], DataConfig())
    assert "\n" not in str(stop.value)
    report = DataReport("skip")
    kept = load_pairs(str(path), "train", [], DataConfig(on_bad_record="skip"), report=report)
    assert [g.origin for g in kept] == [f"{path}:1"] and isinstance(kept[0], Group)
    assert report.skipped_counts() == {reason: 1}
    assert report.skipped[0].field and report.skipped[0].field in field  # the field named, as the message names it
