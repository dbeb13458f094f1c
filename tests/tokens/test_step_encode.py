"""Stepwise files load as one group per problem and encode with each step's end and label, the steps' ids as
`encode_steps` gives them; steps past max_length are cut whole and counted; a split mixing stepwise and
preference records is refused."""

import gzip
import json

import pytest

from conftest import QUICKSTART
from rm.config import load_config
from rm.data.load import load_data
from rm.data.steps.step_problems import write_step_dataset
from rm.errors import DataError
from rm.tokens.prepare import encoded
from rm.tokens.steps.step_tokens import encode_steps
from rm.tokens.tokenizer import special_prefix


def step_run(tmp_path, *overrides):
    root = write_step_dataset(tmp_path / "data", n_train=12, n_test=4, seed=3, k=3)["train"].parent
    return load_config(QUICKSTART, [f"data.source={root}", f"output_dir={tmp_path / 'run'}", *overrides])


def test_a_problem_is_one_group_with_every_steps_end_and_label(tmp_path, tokenizer):
    cfg = step_run(tmp_path, "collator.max_length=1024")
    loaded = load_data(cfg.data, tmp_path / "run")
    items = {item.prompt: item for item in loaded.train}
    assert len(loaded.train) == 12 and all(len(item.responses) == 3 for item in loaded.train)
    data = encoded(cfg, loaded, tokenizer, False)
    prefix = special_prefix(tokenizer)
    checked = 0
    for group in data.train:
        text = tokenizer.decode(group.prompt_ids[len(prefix) :])
        item = items[text]
        solutions = [[step[: -len("\n\n")] for step in steps] for steps in item.steps]
        want = encode_steps(tokenizer, text[: -len("\n\n")], solutions, "\n\n", 0, prefix).group
        assert [list(r) for r in group.response_ids] == [r.tolist() for r in want.response_ids]
        assert group.step_ends == want.step_ends
        assert group.step_labels == [list(labels) for labels in item.step_labels]
        assert list(group.rank) == [int(min(labels) < 0.5) for labels in item.step_labels]
        checked += 1
    assert checked == 12 and data.report.notes["encoding"]["train"]["kept"] == 12
    assert "steps_cut" not in data.report.notes["encoding"]["train"]


def test_steps_past_max_length_are_cut_whole_and_counted(tmp_path, tokenizer):
    cfg = step_run(tmp_path, "collator.max_length=40")
    data = encoded(cfg, load_data(cfg.data, tmp_path / "run"), tokenizer, False)
    note = data.report.notes["encoding"]["train"]
    assert note["steps_cut"] > 0
    for group in data.train:
        assert all(len(group.prompt_ids) + len(r) <= 40 for r in group.response_ids)
        assert [len(e) for e in group.step_ends] == [len(labels) for labels in group.step_labels]
        assert all(ends[-1] == len(r) - 1 for ends, r in zip(group.step_ends, group.response_ids, strict=True))


def test_a_split_mixing_steps_and_pairs_is_refused(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    step = {"prompt": "1 + 1?", "completions": ["1 + 1 = 2"], "labels": [True]}
    pair = {"prompt": "Hi?", "chosen": " Hello.", "rejected": " No."}
    for name, record in (("steps", step), ("pairs", pair)):
        (folder / name).mkdir()
        with gzip.open(folder / name / "train.jsonl.gz", "wt") as f:
            f.write(json.dumps(record) + "\n")
    cfg = load_config(QUICKSTART, [f"data.source={folder}", "data.eval_split=", f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(DataError, match="mixes 1 stepwise problems with 1 preference records"):
        load_data(cfg.data, tmp_path / "run")


def test_the_three_published_layouts_load_alike_through_the_run_loader():
    """The fixtures hold the same solutions in each layout; `data.format: auto` reads each as stepwise groups."""
    from pathlib import Path

    from rm.data.load import load_pairs

    fixtures = Path(__file__).parents[1] / "data" / "steps" / "fixtures"
    loaded = {}
    for name in ("stepwise.jsonl", "math_shepherd.jsonl", "prm800k.jsonl"):
        items = load_pairs(str(fixtures / name), "train", [])
        loaded[name] = [(g.prompt, g.steps, g.step_labels) for g in items]
        assert items and all(g.steps is not None for g in items)
    assert loaded["stepwise.jsonl"] == loaded["math_shepherd.jsonl"] == loaded["prm800k.jsonl"]
