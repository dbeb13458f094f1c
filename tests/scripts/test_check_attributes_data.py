"""The acceptance check's fixture (scripts/check_attributes.py, not its training): HelpSteer2's field names, four
responses per prompt, and every rating the stated function of the text, checked by reading the text back."""

import re
import sys

from conftest import REPO
from rm.data.load import load_pairs

sys.path.insert(0, str(REPO / "scripts"))
import check_attributes  # noqa: E402

FIELDS = {"prompt", "response", "helpfulness", "correctness", "coherence", "complexity", "verbosity"}


def test_ratings_are_the_stated_functions_of_the_text():
    rows = check_attributes.make_rows(40, seed=3)
    assert len(rows) == 160 and all(set(row) == FIELDS for row in rows)
    assert len({row["prompt"] for row in rows}) == 40
    for row in rows:
        a, b = map(int, re.search(r"what is (\d) \+ (\d)\?", row["prompt"]).groups())
        words = row["response"].split()
        right = int(int(words[-1]) == a + b)
        assert row["correctness"] == right and row["verbosity"] == words.count("well") // 2
        assert row["helpfulness"] == 3 * right + (row["verbosity"] >= 2) and row["complexity"] == max(a, b)
    assert {row["correctness"] for row in rows} == {0, 1} and {row["verbosity"] for row in rows} == set(range(5))


def test_rm_reads_the_fixture_as_groups_with_every_attribute(tmp_path):
    path = check_attributes.write_rows(tmp_path / "rows.jsonl", 10, seed=1)
    groups = load_pairs(str(path), "train", [], None)
    assert len(groups) == 10 and all(len(g.responses) == 4 and len(g.attributes) == 4 for g in groups)
    assert all(set(check_attributes.ATTRIBUTES) <= set(scores) for g in groups for scores in g.attributes)
