"""Files people share carry no absolute path of the machine that wrote them: the model card (and the run config
it shows), data_report.json, skipped.jsonl, eval.json and report.md name files relative to the current directory,
or by their name and subset folder. The export's rm_config.yaml alone keeps the absolute locations: it is the
run's record, which `rm eval` reads for the training-data overlap, and the card never shows it."""

import json
import os
from pathlib import Path

import card_runs
import pytest
import yaml

from rm.data.data_report import shown_path, shown_text


@pytest.fixture(scope="session")
def listwise_run(tmp_path_factory):
    return card_runs.group_run(tmp_path_factory)


def machine_prefixes(tmp_path_factory) -> list[str]:
    """The temporary root the data and the output lie under, the home folder and the current directory."""
    found = [str(tmp_path_factory.getbasetemp()), str(Path.home()), os.getcwd()]
    return [p for p in found if len(Path(p).parts) > 1]  # "/" alone would be in every path


@pytest.mark.slow
def test_no_shared_file_of_a_run_and_its_eval_holds_a_path_of_this_machine(listwise_run, tmp_path_factory):
    export, evaluated = listwise_run / "export", listwise_run / "eval"
    texts = [p for p in export.iterdir() if p.suffix in (".md", ".json", ".jinja") and p.name != "rm_config.yaml"]
    texts += [listwise_run / name for name in ("data_report.json", "skipped.jsonl", "eval.json")]
    texts += [evaluated / "eval.json", evaluated / "report.md"]
    assert export / "README.md" in texts and all(p.is_file() for p in texts)
    for path in texts:
        text = path.read_text()
        for prefix in machine_prefixes(tmp_path_factory):
            assert prefix not in text, f"{path.name} holds {prefix}"

    # What they say instead: the data file by its subset folder, the skipped line by that name and its number.
    saved = yaml.safe_load((export / "rm_config.yaml").read_text())
    source = Path(saved["data"]["source"])
    assert source.is_absolute() and source.is_file()  # the run's record keeps where its data lies
    shown = f"{source.parent.name}/{source.name}"
    line = len(source.read_text().splitlines())  # the malformed last line
    assert f"| data | `{shown}` |" in (export / "README.md").read_text()
    assert [b["origin"] for b in json.loads((evaluated / "eval.json").read_text())["eval"]["skipped"]] == [
        f"{shown}:{line}"
    ]
    skipped = [json.loads(row) for row in (listwise_run / "skipped.jsonl").read_text().splitlines()]
    assert [row["origin"] for row in skipped] == [f"{shown}:{line}"]


def test_a_path_is_shown_from_the_current_directory_or_by_its_folder_and_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside, outside = tmp_path / "data" / "hh" / "train.jsonl", tmp_path.parent / "elsewhere" / "sub" / "a.jsonl"
    assert shown_path(str(inside)) == "data/hh/train.jsonl" and shown_path(str(tmp_path)) == "."
    assert shown_path(str(outside)) == "sub/a.jsonl" and shown_path(str(Path.home() / "x.jsonl")) == "x.jsonl"
    assert [shown_path(n) for n in ("org/name", "synthetic", "../data/x.jsonl", "")] == [
        "org/name", "synthetic", "../data/x.jsonl", ""
    ]  # fmt: skip
    origin = f"{outside}:3+7 + {inside}:2"
    said = shown_text({"first": [origin], "why": f"`{outside}` (split train), r(a) / r(b) = 1/2"})
    assert said == {
        "first": ["sub/a.jsonl:3+7 + data/hh/train.jsonl:2"],
        "why": "`sub/a.jsonl` (split train), r(a) / r(b) = 1/2",
    }
