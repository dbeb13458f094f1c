"""`python -m rm data inspect`: its numbers against the same quantities computed directly."""

import json

import numpy as np
import pytest

from conftest import REPO
from rm.cli import main


def conv(*turns):
    return "".join(f"\n\nHuman: {h}\n\nAssistant: {a}" for h, a in turns)


def hh(turns, chosen, rejected):
    return {"chosen": conv(*turns, ("q", chosen)), "rejected": conv(*turns, ("q", rejected))}


@pytest.fixture()
def source(tmp_path):
    """harmless-base: 8 pairs with 0-7 earlier turns, one parting early; helpful-base: 4 pairs and a bad line."""
    harmless = [hh([(f"t{j}", f"a{j} " * j) for j in range(i)], f"yes {i}", "no") for i in range(8)]
    harmless[3] = {"chosen": conv(("x", "one"), ("y", "two")), "rejected": conv(("x", "uno"), ("y", "dos"))}
    helpful = [hh([], "sure " * (1 + 15 * i), "no " * (i + 1)) for i in range(4)]  # the last is too long
    for name, records in (("harmless-base", harmless), ("helpful-base", helpful)):
        (tmp_path / name).mkdir()
        lines = [json.dumps(r) for r in records] + (['{"chosen": '] if name == "helpful-base" else [])
        (tmp_path / name / "train.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path, harmless + helpful


@pytest.fixture()
def tokenizer_dir(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "tok")
    return tmp_path / "tok"


def inspect_json(capsys, *args):
    assert main(["data", "inspect", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_json_matches_direct_computation(source, tokenizer_dir, tokenizer, capsys):
    root, records = source
    out = inspect_json(capsys, root, "--on-bad-record", "skip", "--tokenizer", tokenizer_dir, "--max-length", 40)
    assert out["subsets"] == {"harmless-base": 8, "helpful-base": 4}
    assert out["skipped"] == {"malformed_json": 1}
    assert out["rejected"][0]["origin"] == f"{root}/helpful-base/train.jsonl:5"
    assert out["parts_before_final_turn"] == 1

    from rm.data.formats.hh import split_pair

    def n(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    splits = [split_pair(r["chosen"], r["rejected"]) for r in records]
    prompt = [n(p) for p, _, _ in splits]
    chosen = [n(c) for _, c, _ in splits]
    rejected = [n(r) for _, _, r in splits]
    for name, values in (("prompt", prompt), ("chosen", chosen), ("rejected", rejected)):
        expected = {f"p{q}": int(np.percentile(values, q, method="inverted_cdf")) for q in (50, 90, 95, 99)}
        assert out["token_lengths"][name] == expected | {"max": max(values)}
    assert out["shared_prefix_fraction"] == round(sum(prompt) / (sum(prompt) + sum(chosen)), 4)
    # max_length 40: a pair is dropped when its longer response alone exceeds 40 tokens, and its prompt
    # is cut when prompt + longer response exceeds 40 (no special prefix with this tokenizer).
    longer = [max(c, r) for c, r in zip(chosen, rejected, strict=True)]
    assert out["max_length"]["dropped_too_long"] == sum(m > 40 for m in longer)
    assert out["max_length"]["prompt_truncated"] == sum(m <= 40 < p + m for p, m in zip(prompt, longer, strict=True))
    assert out["max_length"]["prompt_truncated"] > 0 and out["max_length"]["dropped_too_long"] > 0


def test_error_mode_stops_at_the_first_bad_record_with_its_place(source, capsys):
    root, _ = source
    assert main(["data", "inspect", str(root), "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{root}/helpful-base/train.jsonl:5: malformed JSON" in err


def test_text_output_and_subset_selection(source, tokenizer_dir, capsys):
    root, _ = source
    args = ["data", "inspect", str(root), "--subsets", "harmless-base", "--tokenizer", str(tokenizer_dir)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "pairs: 8" in text and "helpful-base" not in text
    assert "shared-prefix fraction" in text and "pairs that part before the final turn: 1" in text


def test_japanese_and_red_team_sources(tokenizer_dir, capsys):
    fixtures = REPO / "tests" / "fixtures"
    args = ("--tokenizer", tokenizer_dir, "--set", "argilla.pairs_from_edits=true")
    out = inspect_json(capsys, fixtures / "argilla_ja.jsonl", *args)
    assert out["subsets"] == {
        "harmless-base": 2,
        "helpful-base": 3,
        "helpful-online": 2,
        "helpful-rejection-sampled": 1,
    }
    assert out["argilla"]["edit_pairs_added"] == 2 and out["skipped"] == {}
    out = inspect_json(capsys, fixtures / "red_team_attempts.jsonl", "--tokenizer", tokenizer_dir)
    assert out["transcripts"] == 3 and out["subsets"] == {"red-team-attempts": 3}
    assert "not meant for fine-tuning" in out["refused_for_training"]
