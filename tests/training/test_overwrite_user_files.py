"""train.overwrite deletes, file by file, only what rm recorded writing: a user's files inside rm's folders
(checkpoints/, export/, rm/) and rm's files edited since stop it in one line naming them, and nothing is deleted."""

import json
import shutil

import pytest

from conftest import QUICKSTART, SHORT
from rm.cli import main as cli

RUN = [*SHORT, "train.report_to=[tensorboard]"]
"""Two steps with a checkpoint, TensorBoard's files under rm/ and the end-of-run export."""
USERS = {
    "export/MY_CARD_EDITS.md": b"my notes on the card\n",
    "checkpoints/my-backup/weights.bin": b"\0" * 64,
    "rm/my-tb/events.out.tfevents.123.mine": b"my own TensorBoard run",
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run with every folder a run writes: checkpoints/, export/, rm/ (TensorBoard), data/, tokenizer/."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert cli(["train", str(QUICKSTART), *RUN, f"output_dir={out}"]) == 0
    return out


def files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def copy(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)  # keeps sizes and bytes: still provably rm's
    return out


def overwrite(out, *more: str) -> int:
    return cli(["train", str(QUICKSTART), *RUN, *more, "train.overwrite=true", f"output_dir={out}"])


def refused(out, capsys) -> str:
    """train.overwrite refused in one line, with not a byte of output_dir changed."""
    before = files(out)
    capsys.readouterr()
    assert overwrite(out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert files(out) == before
    return err


@pytest.mark.slow
def test_the_users_files_inside_rms_folders_stop_overwrite(finished, tmp_path, capsys):
    """The reproduction: a card note in export/, a backup in checkpoints/, one's own TensorBoard run in rm/
    (named as TensorBoard names its files). Refused, naming all three; once moved away, the run is replaced."""
    out = copy(finished, tmp_path)
    for name, data in USERS.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    err = refused(out, capsys)
    assert f"holds {', '.join(sorted(USERS))}, which rm cannot prove the run there wrote (3 files" in err, err
    assert "move these out of output_dir or choose another output_dir" in err
    for name in USERS:
        (out / name).unlink()
    (out / "notes.txt").write_text("not under rm's names\n")
    assert overwrite(out) == 0
    assert (out / "notes.txt").read_text() == "not under rm's names\n"  # untouched, as before
    manifest = json.loads((out / "rm_run.json").read_text())
    assert any(name.startswith("rm/") and "tfevents" in name for name in manifest["grown"])  # recorded by name
    assert "export/README.md" in manifest["files"] and "eval.json" in manifest["files"]  # with [size, CRC-32]


def test_a_file_of_rms_changed_since_stops_overwrite(finished, tmp_path, capsys):
    """A model card edited by hand (the same size: the CRC-32 tells) and a checkpoint's file rewritten: rm
    cannot tell an edit from damage, and a deletion cannot be undone; refused, saying they changed."""
    out = copy(finished, tmp_path)
    card = out / "export" / "README.md"
    card.write_text(card.read_text().replace("#", "*", 1))
    state = out / "checkpoints" / "step-2" / "trainer_state.json"
    state.write_text(state.read_text() + " ")
    err = refused(out, capsys)
    assert "checkpoints/step-2/trainer_state.json (changed since rm wrote it)" in err, err
    assert "export/README.md (changed since rm wrote it), which rm cannot prove" in err, err


def test_the_refusal_names_twenty_files_and_counts_the_rest(finished, tmp_path, capsys):
    out = copy(finished, tmp_path)
    (out / "checkpoints" / "my-backup").mkdir()
    for i in range(25):
        (out / "checkpoints" / "my-backup" / f"shard-{i:02d}.bin").write_bytes(b"mine")
    err = refused(out, capsys)
    assert "shard-19.bin and 5 more, which rm cannot prove the run there wrote (25 files" in err, err
    assert "shard-20.bin" not in err


@pytest.mark.slow
def test_a_re_export_into_the_run_is_recorded(finished, tmp_path, capsys):
    """`rm export RUN --out RUN/export --overwrite --normalize` rewrites the export's config.json: rm wrote it,
    so it records it, and train.overwrite replaces the run afterwards."""
    out = copy(finished, tmp_path)
    assert cli(["export", str(out), "--out", str(out / "export"), "--overwrite", "--normalize"]) == 0
    assert "reward_normalization" in json.loads((out / "export" / "config.json").read_text())
    assert overwrite(out) == 0, capsys.readouterr().err


def test_a_run_directory_of_the_previous_manifest_layout_is_replaced(finished, tmp_path, capsys):
    """A run of an rm that recorded only its start's files (layout 2): its export, TensorBoard and log files are
    known by their names, so `make demo` over it still works; a user's file among them still stops it."""
    out = copy(finished, tmp_path)
    manifest = json.loads((out / "rm_run.json").read_text())
    start = ("data/", "tokenizer/", "data_report.json", "skipped.jsonl")
    files = {name: r if isinstance(r, int) else r[0] for name, r in manifest["files"].items() if name.startswith(start)}
    later = [
        ".export.partial",
        "checkpoints",
        "eval.json",
        "export",
        "rm",
        "rm_run.json",
        "suites.jsonl",
        "train_log.jsonl",
    ]
    old = {"version": 2, "claimed": "then", "pid": 1, "host": "h", "files": files, "later": later}
    (out / "rm_run.json").write_text(json.dumps(old))
    (out / "rm" / "my-tb").mkdir()
    (out / "rm" / "my-tb" / "events.out.tfevents.123.mine").write_text("mine")
    assert "rm/my-tb/events.out.tfevents.123.mine, which rm cannot prove" in refused(out, capsys)
    shutil.rmtree(out / "rm" / "my-tb")
    assert overwrite(out) == 0, capsys.readouterr().err
    assert json.loads((out / "rm_run.json").read_text())["version"] == 3


@pytest.mark.slow
def test_a_resumed_run_keeps_what_it_recorded(finished, tmp_path, capsys):
    """A resumed run claims the folder again: what the first claim proved (TensorBoard's files, the data, the
    tokenizer) stays recorded beside what the resumed run writes, so train.overwrite still replaces it all."""
    out = copy(finished, tmp_path)
    (out / "eval.json").unlink()  # unfinished: its newest checkpoint is step 2
    assert cli(["train", str(QUICKSTART), *RUN, "train.resume=auto", f"output_dir={out}"]) == 0
    grown = json.loads((out / "rm_run.json").read_text())["grown"]
    assert len([name for name in grown if name.startswith("rm/events.out.tfevents.")]) == 2, grown  # both runs'
    assert overwrite(out) == 0, capsys.readouterr().err
