import gzip
import json

import pytest

from rm.data.load import holdout_split, load_pairs, subset_counts
from rm.errors import DataError


def write_jsonl(path, records, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(lines)
    else:
        path.write_text(lines)


HH = {"chosen": "\n\nHuman: hi\n\nAssistant: hello", "rejected": "\n\nHuman: hi\n\nAssistant: go away"}


def test_hh_layout_subsets_come_from_folder_names(tmp_path):
    write_jsonl(tmp_path / "harmless-base" / "train.jsonl.gz", [HH] * 3, gz=True)
    write_jsonl(tmp_path / "helpful-base" / "train.jsonl.gz", [HH] * 2, gz=True)
    write_jsonl(tmp_path / "helpful-base" / "test.jsonl.gz", [HH], gz=True)
    pairs = load_pairs(str(tmp_path), "train", [])
    assert subset_counts(pairs) == {"harmless-base": 3, "helpful-base": 2}
    assert pairs[0].prompt == "\n\nHuman: hi\n\nAssistant:" and pairs[0].chosen == " hello"
    assert pairs[0].origin.endswith("harmless-base/train.jsonl.gz:1")
    assert subset_counts(load_pairs(str(tmp_path), "train", ["helpful-base"])) == {"helpful-base": 2}
    with pytest.raises(DataError, match="helpful-online"):
        load_pairs(str(tmp_path), "train", ["helpful-online"])


def test_single_file_takes_its_own_name_and_prompt_records_load(tmp_path):
    path = tmp_path / "mine" / "prefs.jsonl"
    write_jsonl(path, [{"prompt": "Q?", "chosen": " yes", "rejected": " no", "margin": 2}])
    (pair,) = load_pairs(str(path), "train", [])
    assert (pair.prompt, pair.chosen, pair.rejected, pair.subset, pair.margin) == ("Q?", " yes", " no", "prefs", 2.0)


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"chosen": "x"', r"prefs\.jsonl:2: malformed JSON"),
        ({"chosen": "\n\nHuman: a\n\nAssistant: b"}, r"prefs\.jsonl:2: field 'rejected' is missing"),
        ({"chosen": 3, "rejected": "x"}, r"prefs\.jsonl:2: field 'chosen' must be a string"),
        ({"chosen": HH["chosen"], "rejected": HH["chosen"]}, r"prefs\.jsonl:2: .*identical"),
        ({"prompt": "Q", "chosen": " ", "rejected": "no"}, r"prefs\.jsonl:2: field 'chosen' has an empty response"),
    ],
)
def test_bad_records_name_file_line_and_field(tmp_path, bad, message):
    path = tmp_path / "prefs.jsonl"
    write_jsonl(path, [HH, bad])
    with pytest.raises(DataError, match=message):
        load_pairs(str(path), "train", [])


def test_corrupt_gzip_and_missing_source_are_clear(tmp_path):
    path = tmp_path / "s" / "train.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"train\.jsonl\.gz:1: cannot read"):
        load_pairs(str(path), "train", [])
    with pytest.raises(DataError, match="not found"):
        load_pairs(str(tmp_path / "nope.jsonl"), "train", [])


def test_holdout_split_is_seeded_stratified_and_disjoint(synthetic_root):
    pairs = load_pairs(str(synthetic_root), "train", [])
    a_train, a_eval = holdout_split(pairs, 0.2, seed=3)
    b_train, b_eval = holdout_split(pairs, 0.2, seed=3)
    c_train, c_eval = holdout_split(pairs, 0.2, seed=4)
    assert [p.origin for p in a_eval] == [p.origin for p in b_eval]
    assert [p.origin for p in a_eval] != [p.origin for p in c_eval]
    assert not {p.origin for p in a_eval} & {p.origin for p in a_train}
    assert len(a_train) + len(a_eval) == len(pairs)
    assert not {p.prompt for p in a_eval} & {p.prompt for p in a_train}  # version 2: by prompt
    for subset in subset_counts(pairs):
        prompts = {p.prompt for p in pairs if p.subset == subset}
        assert len({p.prompt for p in a_eval if p.subset == subset}) == round(len(prompts) * 0.2)
    # Version 1, by record: a fifth of each subset's records, whatever their prompts.
    _, by_record = holdout_split(pairs, 0.2, seed=3, version=1)
    for subset, n in subset_counts(pairs).items():
        assert subset_counts(by_record)[subset] == round(n * 0.2)


def test_hub_datasets_load_each_subset_by_data_dir(monkeypatch):
    """Anthropic/hh-rlhf keeps each subset in its own folder; the loader asks for each one."""
    import datasets

    calls = []

    def fake_load_dataset(name, data_dir=None, split=None):
        calls.append((name, data_dir, split))
        return [HH, HH] if data_dir == "helpful-base" else [HH]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    pairs = load_pairs("Anthropic/hh-rlhf", "train", [])
    assert [c[1] for c in calls] == ["harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled"]
    assert all(c[0] == "Anthropic/hh-rlhf" and c[2] == "train" for c in calls)
    assert subset_counts(pairs)["helpful-base"] == 2
    assert pairs[1].origin == "Anthropic/hh-rlhf[helpful-base] row 0"


def test_mixture_weights_scale_each_training_subset_and_leave_eval_alone(tmp_path):
    """harmless-base has 10 train pairs, helpful-base 4. Weights 0.5 and 1.5: 10*0.5 = 5 (a seeded half),
    4*1.5 = 4 + round(0.5*4) = 6 (all once, plus a seeded half again); eval keeps all 3 + 2."""
    from rm.config import DataConfig
    from rm.data.load import load_data

    for subset, n_train, n_test in (("harmless-base", 10, 3), ("helpful-base", 4, 2)):
        recs = [{"prompt": f"{subset} {i}?", "chosen": " a", "rejected": " b"} for i in range(n_train)]
        write_jsonl(tmp_path / subset / "train.jsonl", recs)
        write_jsonl(tmp_path / subset / "test.jsonl", recs[:n_test])
    cfg = DataConfig(source=str(tmp_path), mixture={"harmless-base": 0.5, "helpful-base": 1.5})
    data = load_data(cfg, tmp_path)
    assert subset_counts(data.train) == {"harmless-base": 5, "helpful-base": 6}
    assert subset_counts(data.eval) == {"harmless-base": 3, "helpful-base": 2}
    assert len({p.prompt for p in data.train if p.subset == "harmless-base"}) == 5  # a half, no repeats
    assert len({p.prompt for p in data.train if p.subset == "helpful-base"}) == 4  # every pair at least once
    assert data.report.notes["mixture"]["helpful-base"] == {"weight": 1.5, "before": 4, "after": 6}
    again = load_data(cfg, tmp_path)
    assert [p.prompt for p in again.train] == [p.prompt for p in data.train]  # seeded
    with pytest.raises(DataError, match=r"data\.mixture\.helpful-online: no such subset"):
        load_data(DataConfig(source=str(tmp_path), mixture={"helpful-online": 2.0}), tmp_path)


def test_a_single_file_with_an_eval_split_is_refused_rather_than_evaluated_on_its_training_data(tmp_path):
    from rm.config import DataConfig
    from rm.data.load import load_data

    write_jsonl(tmp_path / "prefs.jsonl", [HH])
    with pytest.raises(DataError, match=r"single file has no separate 'test' split; set data\.eval_split=''"):
        load_data(DataConfig(source=str(tmp_path / "prefs.jsonl")), tmp_path)


def test_a_single_files_subset_is_named_from_the_file_unless_it_is_a_split_file(tmp_path):
    """prefs/my-pairs.jsonl is subset `my-pairs` (not its folder, `prefs`); harmless-base/test.jsonl keeps
    hh-rlhf's layout, where the folder is the subset."""
    record = json.dumps({"prompt": "Q?", "chosen": " yes", "rejected": " no"}) + "\n"
    for folder, name, subset in [
        ("prefs", "my-pairs.jsonl", "my-pairs"),
        ("harmless-base", "test.jsonl", "harmless-base"),
    ]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text(record)
        assert [p.subset for p in load_pairs(str(tmp_path / folder / name), "train", [])] == [subset]
