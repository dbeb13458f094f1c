"""The length check's data: the marker decides every pair, length goes along with it in exactly the share asked,
and the files load as HH data."""

from rm.data.length_pairs import BAD, GOOD, pairs, write_length_dataset
from rm.data.load import load_pairs


def response(text: str) -> str:
    return text.rsplit("\n\nAssistant:", 1)[1].removesuffix(".")


def test_the_marker_decides_and_length_follows_in_the_share_asked():
    for share, n in [(0.8, 50), (0.0, 40), (0.5, 30)]:
        made = pairs(n, seed=3, longer_share=share)
        assert made == pairs(n, seed=3, longer_share=share)  # seeded
        longer = sum(len(response(p["chosen"]).split()) > len(response(p["rejected"]).split()) for p in made)
        assert longer == round(n * share)
        for p in made:
            prompt = p["chosen"].split("\n\nAssistant:")[0]
            assert prompt == p["rejected"].split("\n\nAssistant:")[0]  # one prompt
            chosen, rejected = (response(p[side]).split() for side in ("chosen", "rejected"))
            assert len(set(chosen) & set(GOOD)) == 1 and not set(chosen) & set(BAD)  # one good marker decides
            assert len(set(rejected) & set(BAD)) == 1 and not set(rejected) & set(GOOD)


def test_good_and_bad_markers_are_distinct_words_of_shared_syllables():
    assert len(set(GOOD)) == len(set(BAD)) == 32 and not set(GOOD) & set(BAD)
    assert {w[:2] for w in GOOD} == {w[:2] for w in BAD}  # no syllable alone tells them apart


def test_the_files_load_as_hh_pairs(tmp_path):
    files = write_length_dataset(tmp_path, n_train=20, n_test=10, seed=0)
    train = load_pairs(str(tmp_path / "marker"), "train", [])
    inverted = load_pairs(str(files["inverted"]), "test", [])
    assert len(train) == 20 and len(inverted) == 10
    assert all(len(p.chosen) < len(p.rejected) for p in inverted)
