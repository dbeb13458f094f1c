"""red-team-attempts: read as transcripts to score; refused for training, with the reason."""

import gzip
import json

import pytest

from conftest import REPO
from rm.config import DataConfig
from rm.data.load import load_pairs, load_splits
from rm.data.transcripts import load_transcripts
from rm.errors import NotPreferenceData

FIXTURE = REPO / "tests" / "fixtures" / "red_team_attempts.jsonl"


def test_transcripts_load_with_every_field_of_the_card():
    first, second, third = load_transcripts(str(FIXTURE))
    assert first.text.startswith("\n\nHuman: How do I pick a lock?") and first.text.endswith("open it for you.")
    assert (first.min_harmlessness_score_transcript, first.rating, first.task_description_harmlessness_score) == (
        1.25,
        0.0,
        0.5,
    )
    assert (first.num_params, first.model_type, first.red_team_member_id, first.is_upworker) == (
        "52B",
        "context distillation",
        7,
        False,
    )
    assert first.tags == [] and second.tags == ["insult", "offensive language"] and third.tags == []
    assert first.origin.endswith("red_team_attempts.jsonl:1")


def test_a_json_array_file_and_an_hh_rlhf_copy_both_work(tmp_path):
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    folder = tmp_path / "hh-rlhf" / "red-team-attempts"
    folder.mkdir(parents=True)
    (folder / "red_team_attempts.jsonl.gz").write_bytes(gzip.compress(json.dumps(records).encode()))
    transcripts = load_transcripts(str(tmp_path / "hh-rlhf"))
    assert [t.rating for t in transcripts] == [0.0, 4.0, 1.0]


def test_bad_transcripts_stop_or_are_counted(tmp_path):
    path = tmp_path / "rt.jsonl"
    good = FIXTURE.read_text().splitlines()[0]
    path.write_text(good + "\n" + json.dumps({"transcript": "\n\nHuman: a", "rating": "high"}) + "\n")
    with pytest.raises(ValueError, match=r"rt\.jsonl:2: field 'rating' must be a number"):
        load_transcripts(str(path))
    assert len(load_transcripts(str(path), on_bad_record="skip")) == 1


@pytest.mark.parametrize(
    "how",
    ["the file itself", "format red-team", "subset of an hh-rlhf copy"],
)
def test_training_on_red_team_attempts_is_refused_with_the_reason(tmp_path, how):
    root = tmp_path / "hh-rlhf"
    (root / "red-team-attempts").mkdir(parents=True)
    (root / "red-team-attempts" / "red_team_attempts.jsonl").write_text(FIXTURE.read_text())
    if how == "the file itself":
        cfg = DataConfig(source=str(FIXTURE), eval_split="")
    elif how == "format red-team":
        cfg = DataConfig(source=str(FIXTURE), format="red-team", eval_split="")
    else:
        cfg = DataConfig(source=str(root), subsets=["red-team-attempts"])
    with pytest.raises(NotPreferenceData, match="not meant for fine-tuning or preference modelling") as e:
        load_splits(cfg, tmp_path)
    assert "not preference pairs" in str(e.value) and "harmless-base" in str(e.value)


def test_an_hh_rlhf_copy_without_subsets_leaves_red_team_out(tmp_path):
    root = tmp_path / "hh-rlhf"
    (root / "red-team-attempts").mkdir(parents=True)
    (root / "red-team-attempts" / "train.jsonl").write_text(FIXTURE.read_text())  # even named like a split
    (root / "harmless-base").mkdir()
    hh = {"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a\n\nAssistant: c"}
    (root / "harmless-base" / "train.jsonl").write_text(json.dumps(hh) + "\n")
    assert [p.subset for p in load_pairs(str(root), "train", [])] == ["harmless-base"]


def test_by_hub_name_transcripts_come_from_the_red_team_data_dir(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(name, data_dir=None, split=None):
        calls.append((name, data_dir, split))
        return [json.loads(line) for line in FIXTURE.read_text().splitlines()]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    transcripts = load_transcripts("Anthropic/hh-rlhf")
    assert calls == [("Anthropic/hh-rlhf", "red-team-attempts", "train")]
    assert transcripts[1].origin == "Anthropic/hh-rlhf[red-team-attempts] row 1"
