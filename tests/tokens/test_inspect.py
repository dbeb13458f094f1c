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


# Groups: K, ties and ranks, beside the token lengths and what max_length would do.
LONG = "word " * 120
GROUP_RECORDS = [
    {"prompt": "\n\nHuman: Name a colour.\n\nAssistant:",
     "answers": [{"answer": a, "rank": r, "model": "m"} for a, r in (("Red.", 2), ("Blue.", 1), ("Teal.", 4),
                                                                      ("Green.", 3))]},
    {"instruction": "What is 2 plus 2?",
     "completions": [{"response": t, "overall_score": s} for t, s in (("4.", 8), ("Four.", 8), ("5.", 5), (LONG, 3))]},
    {"prompt": "Pick a number.", "chosen": ["Seven."], "rejected": ["Three.", "Nine.", "Ten."]},
    {"prompt": "Say hi.", "responses": [{"text": t, "rank": r} for t, r in (("Hi.", 2), ("Hello.", 1), ("Yo.", 3))]},
]  # fmt: skip
ORDER = [[-2, -1, -4, -3], [8, 8, 5, 3], [1, 0, 0, 0], [-2, -1, -3]]
"""Each record's responses by how good the record says they are (higher is better): the reference."""
HH_TEXTS = [  # (prompt, responses) as training renders them (this tokenizer has no chat template: HH text)
    ("\n\nHuman: Name a colour.\n\nAssistant:", [" Red.", " Blue.", " Teal.", " Green."]),
    ("\n\nHuman: What is 2 plus 2?\n\nAssistant:", [" 4.", " Four.", " 5.", " " + LONG]),
    ("\n\nHuman: Pick a number.\n\nAssistant:", [" Seven.", " Three.", " Nine.", " Ten."]),
    ("\n\nHuman: Say hi.\n\nAssistant:", [" Hi.", " Hello.", " Yo."]),
]


def test_group_sources_show_k_ties_and_ranks(tokenizer_dir, tokenizer, tmp_path, capsys):
    from itertools import combinations

    (tmp_path / "groups.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GROUP_RECORDS))
    args = (tmp_path / "groups.jsonl", "--tokenizer", tokenizer_dir, "--max-length", 100)
    out = inspect_json(capsys, *args)
    pairs = [[a == b for a, b in combinations(order, 2)] for order in ORDER]
    assert out["groups"] == 4 and out["responses"] == sum(map(len, ORDER))
    assert out["k"] == {"3": 1, "4": 3}
    assert out["pairs"] == sum(p.count(False) for p in pairs) == 17
    assert out["ties"] == {"tied_pairs": sum(p.count(True) for p in pairs), "groups_with_a_tie": 2}
    total = sum(len(set(order)) == len(order) for order in ORDER)
    assert out["ranks"] == {"total_order": total, "partial_order": 4 - total} and total == 2

    def n(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompts = [n(p) for p, _ in HH_TEXTS]
    responses = [[n(r) for r in rs] for _, rs in HH_TEXTS]
    assert out["token_lengths"]["group"]["max"] == max(p + sum(rs) for p, rs in zip(prompts, responses, strict=True))
    assert out["token_lengths"]["sequence"]["max"] == max(p + max(rs) for p, rs in zip(prompts, responses, strict=True))
    assert out["token_lengths"]["response"]["max"] == max(map(max, responses)) > 100
    shared = sum(p * len(rs) for p, rs in zip(prompts, responses, strict=True))
    assert out["shared_prefix_fraction"] == round(shared / (shared + sum(map(sum, responses))), 4)
    # The long answer alone is past max_length 100: it leaves its group of four, which keeps three.
    assert out["max_length"]["responses_dropped"] == 1 and out["max_length"]["dropped_too_long"] == 0

    assert main(["data", "inspect", *map(str, args)]) == 0
    text = capsys.readouterr().out
    assert "groups: 4 (15 responses, 17 ordered pairs)" in text and "K=3: 1, K=4: 3" in text
    assert "ties: 4 tied pairs, in 2 groups" in text and "2 groups in a total order, 2 partial" in text
    assert "1 responses left out of their groups" in text


def test_pairwise_sources_read_as_before_with_their_ties_and_merged_into_groups_on_request(
    tokenizer_dir, tmp_path, capsys
):
    """A pairwise source keeps today's report (no group keys), plus its tied pairs when it says any; with
    data.group_by_prompt=true, pairs of one prompt are one group whose ranks come from the given pairs:
    a > b, b > c, a > c orders all three, d > e and d > f leave e and f unordered (a partial order, as is the
    tied pair g = h, a group of two)."""
    rows = [("P1", "a", "b"), ("P1", "b", "c"), ("P1", "a", "c"), ("P2", "d", "e"), ("P2", "d", "f")]
    records = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in rows]
    records.append({"prompt": "P3", "chosen": "g", "rejected": "h", "tie": True})
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = inspect_json(capsys, tmp_path / "pairs.jsonl", "--tokenizer", tokenizer_dir)
    assert out["pairs"] == 6 and out["ties"] == {"tied_pairs": 1}
    assert not {"groups", "k", "ranks"} & set(out) and "parts_before_final_turn" in out

    out = inspect_json(capsys, tmp_path / "pairs.jsonl", "--tokenizer", tokenizer_dir, "--set", "group_by_prompt=true")
    assert out["k"] == {"2": 1, "3": 2} and out["ranks"] == {"total_order": 1, "partial_order": 2}
    assert out["pairs"] == 5 and out["ties"] == {"tied_pairs": 1, "groups_with_a_tie": 1}
