import gzip
import json
from collections import Counter

from rm.data import synthetic
from rm.data.formats.hh import ASSISTANT, parse_turns
from rm.data.load import load_pairs, subset_counts


def test_generation_is_deterministic_and_seeded(tmp_path):
    a = synthetic.write_dataset(tmp_path / "a", 60, 30, seed=1)
    b = synthetic.write_dataset(tmp_path / "b", 60, 30, seed=1)
    c = synthetic.write_dataset(tmp_path / "c", 60, 30, seed=2)
    for subset in synthetic.SUBSETS:
        for split in ("train", "test"):
            name = f"{subset}/{split}.jsonl.gz"
            assert (a / name).read_bytes() == (b / name).read_bytes()
        assert (a / subset / "train.jsonl.gz").read_bytes() != (c / subset / "train.jsonl.gz").read_bytes()


def test_records_are_multi_turn_hh_text_in_the_hh_layout(synthetic_root):
    assert len(synthetic.SUBSETS) >= 3
    turns_seen = Counter()
    for subset in synthetic.SUBSETS:
        with gzip.open(synthetic_root / subset / "train.jsonl.gz", "rt") as f:
            for line in f:
                rec = json.loads(line)
                assert set(rec) == {"chosen", "rejected"}
                for text in rec.values():
                    assert text.startswith("\n\nHuman: ")
                    turns = parse_turns(text)
                    assert [t.role for t in turns] == ["Human", "Assistant"] * (len(turns) // 2)
                    turns_seen[len(turns) // 2] += 1
    assert sum(n for k, n in turns_seen.items() if k >= 2) > 0.3 * sum(turns_seen.values())  # multi-turn
    pairs = load_pairs(str(synthetic_root), "train", [])
    assert subset_counts(pairs) == {s: 100 for s in synthetic.SUBSETS}
    assert any(ASSISTANT in p.chosen for p in pairs), "no pair parts before the final turn"


def prompt_blind_accuracy(train, test):
    """The best a model that sees only the two responses can do: how often each response text
    won in training decides (ties count half). Returns accuracy per subset on `test`."""
    wins, seen = Counter(), Counter()
    for p in train:
        wins[p.chosen] += 1
        seen[p.chosen] += 1
        seen[p.rejected] += 1

    def score(text):
        return (wins[text] + 1) / (seen[text] + 2)

    right, total = Counter(), Counter()
    for p in test:
        c, r = score(p.chosen), score(p.rejected)
        right[p.subset] += 1.0 if c > r else 0.5 if c == r else 0.0
        total[p.subset] += 1
    return {s: right[s] / total[s] for s in total}


def test_prompt_dependent_subsets_defeat_a_prompt_blind_model(tmp_path):
    """Where the prompt decides, a response-only model is a coin; where it does not, it is not."""
    root = synthetic.write_dataset(tmp_path, 6000, 1500, seed=3)
    acc = prompt_blind_accuracy(load_pairs(str(root), "train", []), load_pairs(str(root), "test", []))
    assert synthetic.PROMPT_DEPENDENT and synthetic.PROMPT_DEPENDENT < set(synthetic.SUBSETS)
    for subset in synthetic.SUBSETS:
        if subset in synthetic.PROMPT_DEPENDENT:
            assert 0.42 <= acc[subset] <= 0.58, (subset, acc[subset])
        else:
            assert acc[subset] >= 0.8, (subset, acc[subset])
