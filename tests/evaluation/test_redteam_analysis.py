"""Red-team analysis on fixtures written in the red-team-attempts format (fields from the HH-RLHF card)."""

import json
import math

import matplotlib.image
import numpy as np
import pytest

from rm.errors import DataError
from rm.evaluation.metrics import spearman
from rm.evaluation.redteam_analysis import analyze, load_scored
from rm.evaluation.redteam_analysis import run_redteam as main

# Rewards and annotations worked by hand below: rows 0-2 "plain lm", 3-5 "rlhf".
REWARD = [0.1, 0.4, 0.2, 0.9, 0.5, 0.3]
HARMLESS = [-2.0, 1.0, -1.0, 3.0, 2.0, 0.0]
RATING = [4, 1, 3, 0, 0, 2]
MODEL_TYPE = ["plain lm"] * 3 + ["rlhf"] * 3
NUM_PARAMS = ["52B", "810M", "13B", "52B", "810M", "13B"]


def attempt(i: int, **over) -> dict:
    """One record with every field of red-team-attempts, values in the card's types."""
    rec = {
        "transcript": f"\n\nHuman: How do I pick lock number {i}?\n\nAssistant: I can't help with that {i}.",
        "min_harmlessness_score_transcript": HARMLESS[i % 6],
        "num_params": NUM_PARAMS[i % 6],
        "model_type": MODEL_TYPE[i % 6],
        "rating": float(RATING[i % 6]),
        "task_description": f"tried to get lock picking advice {i}",
        "task_description_harmlessness_score": -0.5,
        "red_team_member_id": i % 3,
        "is_upworker": bool(i % 2),
        "tags": None,
    }
    return rec | over


def write_scored(path, rewards, records):
    path.write_text("".join(json.dumps(rec | {"reward": r}) + "\n" for r, rec in zip(rewards, records, strict=True)))
    return path


def test_spearman_overall_and_per_group_by_hand(tmp_path):
    """Reward ranks 1 4 2 6 5 3 equal the harmlessness ranks: rho = 1 overall and in each group.
    Rating ranks 6 3 5 1.5 1.5 4 (two zeros tie): centred products -17, squares 17.5 and 17, so
    rho = -17 / sqrt(17.5 * 17). "plain lm" ratings 4 1 3 against reward ranks 1 3 2: rho = -1.
    "rlhf" ratings 0 0 2 (ranks 1.5 1.5 3) against reward ranks 3 2 1: -1.5 / sqrt(2 * 1.5).
    Each num_params group has two rows (rho = +-1); they sort by size: 810M, 13B, 52B."""
    rows = load_scored(write_scored(tmp_path / "s.jsonl", REWARD, [attempt(i) for i in range(6)]))
    result = analyze(rows)
    h, r = "min_harmlessness_score_transcript", "rating"
    assert result["overall"][h] == {"spearman": pytest.approx(1.0), "n": 6}
    assert result["overall"][r]["spearman"] == pytest.approx(-17 / math.sqrt(17.5 * 17))
    assert result["model_type"]["plain lm"][r]["spearman"] == pytest.approx(-1.0)
    assert result["model_type"]["rlhf"][r]["spearman"] == pytest.approx(-1.5 / math.sqrt(3))
    assert result["model_type"]["rlhf"][h]["spearman"] == pytest.approx(1.0)
    assert list(result["num_params"]) == ["810M", "13B", "52B"]
    assert result["num_params"]["52B"][r] == {"spearman": pytest.approx(-1.0), "n": 2}
    assert result["num_params"]["810M"]["records"] == 2


def test_missing_targets_leave_only_their_own_correlation(tmp_path):
    records = [attempt(i) for i in range(6)] + [
        attempt(6, rating=None),
        attempt(7, min_harmlessness_score_transcript=None),
    ]
    rows = load_scored(write_scored(tmp_path / "s.jsonl", REWARD + [0.0, 0.0], records))
    result = analyze(rows)
    assert result["overall"]["records"] == 8
    assert result["overall"]["rating"]["n"] == 7 and result["overall"]["min_harmlessness_score_transcript"]["n"] == 7


def test_bad_fields_name_the_line(tmp_path):
    path = write_scored(tmp_path / "s.jsonl", [0.1, 0.2], [attempt(0), attempt(1, rating="high")])
    with pytest.raises(DataError, match=r"s\.jsonl:2: field 'rating' must be a number, got 'high'"):
        load_scored(path)
    path.write_text(json.dumps(attempt(0)) + "\n")
    with pytest.raises(DataError, match=r"s\.jsonl:1: field 'reward' must be a number, got missing"):
        load_scored(path)


@pytest.mark.slow
def test_end_to_end_scores_the_transcripts_and_plots(exported_tiny, tmp_path):
    """Scored with a tiny model: the correlations in redteam.json are those of the scores it wrote."""
    from rm.model.pretrained import load_reward_model

    src = tmp_path / "red_team_attempts.jsonl"
    src.write_text("".join(json.dumps(attempt(i)) + "\n" for i in range(24)))
    model, tok = load_reward_model(str(exported_tiny))
    out = tmp_path / "out"
    result = main(out, model=model, tokenizer=tok, input=str(src), batch_size=8, field="transcript", max_length=256)
    scored = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scored) == 24 and all(isinstance(s["reward"], float) for s in scored)
    expect = spearman([s["reward"] for s in scored], [s["rating"] for s in scored])
    assert result["overall"]["rating"]["spearman"] == pytest.approx(expect)
    saved = json.loads((out / "redteam.json").read_text())
    assert set(saved["model_type"]) == {"plain lm", "rlhf"} and saved["overall"]["records"] == 24
    png = out / "redteam.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(png).shape[0] > 100
    again = main(tmp_path / "again", scores=str(out / "scores.jsonl"))  # reuse the scored file
    assert np.isclose(again["overall"]["rating"]["spearman"], expect)
