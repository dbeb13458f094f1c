"""The length check's data: the marker decides every pair, length goes along with it in exactly the share asked,
and the files load as HH data."""

from rm.data.length_pairs import WORDS, pairs, write_length_dataset
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
            (asked,) = [w for w in WORDS if w in prompt]
            chosen, rejected = (set(response(p[side]).split()) & set(WORDS) for side in ("chosen", "rejected"))
            assert chosen == {asked} and len(rejected) == 1 and asked not in rejected  # the word asked for decides


def test_the_files_load_as_hh_pairs(tmp_path):
    files = write_length_dataset(tmp_path, n_train=20, n_test=10, seed=0)
    train = load_pairs(str(tmp_path / "marker"), "train", [])
    inverted = load_pairs(str(files["inverted"]), "test", [])
    assert len(train) == 20 and len(inverted) == 10
    assert all(len(p.chosen) < len(p.rejected) for p in inverted)
