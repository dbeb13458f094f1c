"""K-response record formats (rm/data/formats/ranked.py) from records written here in each dataset's published
field names: the group's text as the HH renderer writes it, its ranks, and one named RecordError per bad record."""

import pytest

from rm.data.formats.chat import Renderer
from rm.data.formats.group import ranks_from_scores
from rm.data.formats.ranked import parse_nectar, parse_responses, parse_rewardbench2, parse_ultrafeedback
from rm.errors import RecordError

HH = Renderer()  # no tokenizer: HH text


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
    group = parse_ultrafeedback(
        ultrafeedback([7.5, 3, 7.5, 6], ["4", "2", "5", "N/A"]), "f:1", HH, "uf", "overall_score"
    )
    assert group.prompt == "\n\nHuman: Name a prime number.\n\nAssistant:"
    assert group.responses == (" answer 0", " answer 1", " answer 2", " answer 3")
    assert group.rank == (0, 2, 0, 1) and group.scores == (7.5, 3.0, 7.5, 6.0)
    assert group.subset == "uf" and group.origin == "f:1"


def test_ultrafeedback_reads_an_aspect_rating_and_leaves_unrated_completions_out():
    group = parse_ultrafeedback(ultrafeedback([1, 2, 3, 4], ["4", "2", "5", "N/A"]), "f:2", HH, "uf", "helpfulness")
    assert group.responses == (" answer 0", " answer 1", " answer 2")  # answer 3's helpfulness is N/A
    assert group.rank == (1, 2, 0)
    with pytest.raises(RecordError, match=r"completions\[0\].annotations.helpfulness") as bad:
        parse_ultrafeedback(ultrafeedback([1, 2], ["four", "2"]), "f:3", HH, "uf", "helpfulness")
    assert bad.value.reason == "not_a_number"
    with pytest.raises(RecordError, match="no such score") as missing:
        parse_ultrafeedback(ultrafeedback([1, 2], ["4", "2"]), "f:4", HH, "uf", "harmlessness")
    assert missing.value.reason == "missing_field"


def test_nectar_ranks_from_one_and_answers_follow_the_hh_prompt_after_a_space():
    record = {
        "prompt": "\n\nHuman: What is 2+2?\n\nAssistant:",
        "answers": [{"answer": "4", "model": "a", "rank": 2}, {"answer": "Four.", "model": "b", "rank": 1},
                    {"answer": " 5", "model": "c", "rank": 3}],
        "turns": 1, "num_responses": 3, "source": ["x"], "good_natured": True,
    }  # fmt: skip
    group = parse_nectar(record, "n:1", "nectar")
    assert group.prompt == "\n\nHuman: What is 2+2?\n\nAssistant:"
    assert group.responses == (" 4", " Four.", " 5") and group.rank == (1, 0, 2)
    record["answers"][2]["rank"] = 1
    with pytest.raises(RecordError, match="rank 1 to more than one") as dup:
        parse_nectar(record, "n:2", "nectar")
    assert dup.value.reason == "duplicate_rank"
    del record["answers"][2]["rank"]
    with pytest.raises(RecordError, match=r"answers\[2\].rank") as missing:
        parse_nectar(record, "n:3", "nectar")
    assert missing.value.reason == "missing_rank"
    with pytest.raises(RecordError, match="must end on"):
        parse_nectar({**record, "prompt": "What is 2+2?"}, "n:4", "nectar")


def test_rewardbench2_puts_every_chosen_over_every_rejected():
    record = {"id": "1", "prompt": "Say hi.", "chosen": ["Hi!"], "rejected": ["Bye.", "No.", "..."],
              "num_correct": 1, "num_incorrect": 3, "total_completions": 4, "models": [],
              "subset": "Focus"}  # fmt: skip
    group = parse_rewardbench2(record, "rb:1", HH, "default")
    assert group.rank == (0, 1, 1, 1) and group.subset == "Focus"
    assert group.responses == (" Hi!", " Bye.", " No.", " ...")
    with pytest.raises(RecordError, match="at least one chosen"):
        parse_rewardbench2({**record, "chosen": []}, "rb:2", HH, "default")


def test_generic_responses_take_scores_or_ranks_text_or_messages():
    scored = {"prompt": "Q?", "responses": [{"text": "a", "score": 0.5}, {"text": "b", "score": 2}]}
    group = parse_responses(scored, "g:1", HH, "default")
    assert group.rank == (1, 0) and group.scores == (0.5, 2.0)
    ranked = {
        "prompt": [{"role": "user", "content": "Q?"}],
        "responses": [{"messages": [{"role": "assistant", "content": "a"}], "rank": 2},
                      {"messages": [{"role": "assistant", "content": "b"}], "rank": 1}],
    }  # fmt: skip
    group = parse_responses(ranked, "g:2", HH, "default")
    assert group.prompt == "\n\nHuman: Q?\n\nAssistant:" and group.responses == (" a", " b") and group.rank == (1, 0)
    mixed = {"prompt": "Q?", "responses": [{"text": "a", "score": 1}, {"text": "b", "rank": 1}]}
    with pytest.raises(RecordError, match="give one kind"):
        parse_responses(mixed, "g:3", HH, "default")


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
        parse_responses({"prompt": "Q?", "responses": responses}, "g:9", HH, "default")
    assert bad.value.reason == reason


def test_scores_become_dense_ranks_highest_first():
    assert ranks_from_scores([3, 5, 3, 1]) == (1, 0, 1, 2)
    assert ranks_from_scores([0.1, 0.2]) == (1, 0)
