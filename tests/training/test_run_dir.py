"""Whose output_dir it is: a run claims it only when training starts, keeps only what describes the run in its
config.yaml (absolute paths, no one-time commands), and a resume of a finished run touches nothing."""

import hashlib
import json
import os
import shutil
import signal

import pytest
import yaml

import rm.training.run
from conftest import QUICKSTART
from conftest import SHORT as SHORT_RUN
from rm.cli import main as cli
from rm.config import load_config

SHORT = [*SHORT_RUN, "train.save_steps=2"]


def checksums(folder) -> dict[str, str]:
    """Every file under `folder` (path relative to it) with the SHA-256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_resuming_a_finished_run_changes_nothing(tmp_path, capsys):
    """The demo sets train.overwrite=true; its saved config.yaml must not carry it (nor train.resume), so that
    resuming from that config does not retrain from step 0 and replace eval.json, export/ and the logs."""
    out = tmp_path / "run"
    assert cli(["train", str(QUICKSTART), *SHORT, "train.overwrite=true", f"output_dir={out}"]) == 0
    for saved in (
        out / "config.yaml",
        out / "checkpoints" / "step-2" / "config.yaml",
        out / "export" / "rm_config.yaml",
    ):
        train = yaml.safe_load(saved.read_text())["train"]
        assert train["overwrite"] is False and train["resume"] == "", saved
    before = checksums(out)
    capsys.readouterr()

    assert cli(["train", str(out / "config.yaml"), "train.resume=auto"]) == 0
    assert f"{out} already finished at step 2; nothing to resume" in capsys.readouterr().out
    assert checksums(out) == before

    # resume and overwrite at once is a contradiction, refused before anything is touched
    assert cli(["train", str(out / "config.yaml"), "train.resume=auto", "train.overwrite=true"]) == 2
    assert "contradict each other" in capsys.readouterr().err
    assert checksums(out) == before


def bad_data(folder, broken: bool):
    """A prompt/chosen/rejected train.jsonl and test.jsonl; `broken`: line 3 of train.jsonl is not JSON."""
    folder.mkdir(exist_ok=True)
    for split in ("train", "test"):
        lines = [json.dumps({"prompt": f"q{i}?", "chosen": f"yes {i}", "rejected": "no"}) for i in range(24)]
        if broken and split == "train":
            lines[2] = "{not json"
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_a_run_that_fails_before_training_leaves_nothing_and_the_fixed_command_runs(tmp_path, capsys):
    """A data error used to leave config.yaml behind, and the same command, fixed, was then refused."""
    data, out = tmp_path / "data", tmp_path / "runs" / "x"
    bad_data(data, broken=True)
    command = ["train", str(QUICKSTART), *SHORT, f"data.source={data}", "export.enabled=false", f"output_dir={out}"]
    assert cli(command) == 2
    assert "train.jsonl:3" in capsys.readouterr().err
    assert not out.exists() and not out.parent.exists()  # nothing left, not even the folders it made
    bad_data(data, broken=False)
    assert cli(command) == 0
    assert (out / "eval.json").is_file() and (out / "rm_run.json").is_file()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_while_loading_leaves_the_folder_as_it_was(tmp_path, capsys, monkeypatch, signum):
    """Stopped while tokenizing (after the run's tokenizer and data were written): exit 128 + the signal, and
    output_dir holds only what it held before (here a user's notes), not a half-claimed run."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    real = rm.training.run.prepare_data

    def stopped_while_tokenizing(*args, **kwargs):
        real(*args, **kwargs)  # writes data/, tokenizer/
        os.kill(os.getpid(), signum)
        raise AssertionError("the signal should have stopped the run")

    def unhandled(signum, frame):  # what rm's own handler replaces; without one, SIGTERM would end pytest
        raise AssertionError(f"rm did not handle signal {signum}")

    monkeypatch.setattr(rm.training.run, "prepare_data", stopped_while_tokenizing)
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        assert cli(["train", str(QUICKSTART), *SHORT, f"output_dir={out}"]) == 128 + signum
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert "Traceback" not in capsys.readouterr().err


def test_files_rm_did_not_write_are_never_written_over(tmp_path, capsys):
    """A folder holding a config.yaml of one's own is not an rm run: refused, even with train.overwrite."""
    (tmp_path / "config.yaml").write_text("my: notes\n")
    for more in ([], ["train.overwrite=true"]):
        assert cli(["train", str(QUICKSTART), *SHORT, *more, f"output_dir={tmp_path}"]) == 2
        err = capsys.readouterr().err
        assert "holds config.yaml, which no rm run claimed" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
    assert (tmp_path / "config.yaml").read_text() == "my: notes\n"


@pytest.mark.slow
def test_the_saved_config_holds_absolute_paths_and_works_from_another_directory(tmp_path, monkeypatch, capsys):
    """Paths in a config are read from the current directory; the run's config.yaml holds them absolute, so
    exporting (which reads the data to normalise) works from anywhere."""
    bad_data(tmp_path / "data", broken=False)
    monkeypatch.chdir(tmp_path)
    overrides = [*SHORT, "data.source=data", "export.enabled=false", "output_dir=runs/rel"]
    assert cli(["train", str(QUICKSTART), *overrides]) == 0
    saved = load_config(tmp_path / "runs" / "rel" / "config.yaml")
    assert saved.output_dir == str(tmp_path / "runs" / "rel") and saved.data.source == str(tmp_path / "data")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli(["export", str(tmp_path / "runs" / "rel"), "--out", "e", "--normalize"]) == 0, capsys.readouterr().err
    assert "reward_normalization" in json.loads((elsewhere / "e" / "config.json").read_text())


@pytest.mark.slow
def test_overwrite_deletes_only_what_the_run_wrote(tmp_path, capsys):
    """A run's folder where the user then kept data/prefs.jsonl (their run's own source) and the run
    itself read its data from elsewhere: train.overwrite deleted data/. It is not in the run's manifest: refused
    in one line, nothing deleted; once moved away, overwrite replaces only the run's files."""
    bad_data(tmp_path / "src", broken=False)
    out = tmp_path / "proj"
    command = ["train", str(QUICKSTART), *SHORT, f"data.source={tmp_path / 'src'}", "export.enabled=false"]
    assert cli([*command, f"output_dir={out}"]) == 0
    manifest = json.loads((out / "rm_run.json").read_text())
    assert not any(name.startswith("data/") for name in manifest["files"]) and "eval.json" in manifest["files"]
    (out / "data").mkdir()
    (out / "data" / "prefs.jsonl").write_text("mine\n")
    (out / "notes.txt").write_text("mine too\n")
    capsys.readouterr()
    assert cli([*command, "train.overwrite=true", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert "data/prefs.jsonl, which rm cannot prove" in err and len(err.strip().splitlines()) == 1, err
    assert (out / "data" / "prefs.jsonl").read_text() == "mine\n" and (out / "eval.json").is_file()
    (out / "data" / "prefs.jsonl").unlink()
    (out / "data").rmdir()
    assert cli([*command, "train.overwrite=true", f"output_dir={out}"]) == 0
    assert (out / "notes.txt").read_text() == "mine too\n"  # never rm's: kept


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    """A finished run on generated data (what `make demo` leaves in runs/quickstart)."""
    out = tmp_path_factory.mktemp("synthetic") / "run"
    assert cli(["train", str(QUICKSTART), *SHORT, "export.enabled=false", f"output_dir={out}"]) == 0
    return out


def test_a_file_changed_since_the_run_wrote_it_is_not_deleted(synthetic_run, tmp_path, capsys):
    """The generated data/ is the run's, listed with sizes: one file of it rewritten by the user is no longer
    provably rm's, and overwrite refuses rather than delete it."""
    out = tmp_path / "run"
    shutil.copytree(synthetic_run, out)
    listed = json.loads((out / "rm_run.json").read_text())["files"]
    assert any(name.startswith("data/") for name in listed) and any(name.startswith("tokenizer/") for name in listed)
    edited = next(out.glob("data/*/train.jsonl.gz"))
    edited.write_bytes(b"my own edit")
    assert cli(["train", str(QUICKSTART), *SHORT, "train.overwrite=true", f"output_dir={out}"]) == 2
    assert "which rm cannot prove" in capsys.readouterr().err
    assert edited.read_bytes() == b"my own edit"


@pytest.mark.parametrize("manifest", ["none", "names"])
def test_an_old_run_directory_is_still_replaced(synthetic_run, tmp_path, capsys, manifest):
    """`make demo` over a runs/quickstart of an rm that wrote no manifest (or a manifest of bare file names): its
    config.yaml loads as a run config, so its known files are replaced; a file of the user's beside them stays."""
    out = tmp_path / "run"
    shutil.copytree(synthetic_run, out)
    if manifest == "none":
        (out / "rm_run.json").unlink()
    else:
        (out / "rm_run.json").write_text(json.dumps({"claimed": "then", "pid": 1, "files": ["config.yaml", "data"]}))
    (out / "notes.txt").write_text("mine\n")
    assert cli(["train", str(QUICKSTART), *SHORT, "train.overwrite=true", f"output_dir={out}"]) == 0
    assert (out / "notes.txt").read_text() == "mine\n"
    assert json.loads((out / "rm_run.json").read_text())["version"] == 3


def test_a_config_yaml_that_is_not_a_run_config_makes_no_old_run(tmp_path, capsys):
    """Before: any config.yaml with a train_log.jsonl beside it was an old run, and overwrite deleted both."""
    (tmp_path / "config.yaml").write_text("my: notes\n")
    (tmp_path / "train_log.jsonl").write_text('{"mine": 1}\n')
    assert cli(["train", str(QUICKSTART), *SHORT, "train.overwrite=true", f"output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "which no rm run claimed" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "config.yaml").read_text() == "my: notes\n" and (tmp_path / "train_log.jsonl").is_file()


def test_an_old_run_keeps_data_its_config_did_not_generate(synthetic_run, tmp_path, capsys):
    """An old run directory (no manifest) whose config read its data from elsewhere: a data/ there is the
    user's, and overwrite refuses rather than delete it."""
    out = tmp_path / "run"
    shutil.copytree(synthetic_run, out)
    (out / "rm_run.json").unlink()
    config = yaml.safe_load((out / "config.yaml").read_text())
    config["data"]["source"] = str(tmp_path / "elsewhere")
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    assert cli(["train", str(QUICKSTART), *SHORT, "train.overwrite=true", f"output_dir={out}"]) == 2
    assert "which rm cannot prove" in capsys.readouterr().err
    assert any((out / "data").rglob("*.jsonl.gz"))


def test_export_overwrite_replaces_only_an_export(synthetic_run, tmp_path, capsys):
    """`rm export --overwrite` follows the same rule: an export folder holding a file of the user's (or an
    rm_config.yaml that is no run config) is refused in one line and kept as it was."""
    out = tmp_path / "e"
    assert cli(["export", str(synthetic_run), "--out", str(out)]) == 0
    assert cli(["export", str(synthetic_run), "--out", str(out), "--overwrite"]) == 0  # an export: replaced
    (out / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    assert cli(["export", str(synthetic_run), "--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "holds notes.txt, which an rm export does not write" in err and len(err.strip().splitlines()) == 1
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "model.safetensors").is_file()
    (out / "notes.txt").unlink()
    (out / "rm_config.yaml").write_text("my: notes\n")
    assert cli(["export", str(synthetic_run), "--out", str(out), "--overwrite"]) == 2
    assert "not an rm run config" in capsys.readouterr().err
    assert (out / "rm_config.yaml").read_text() == "my: notes\n"
