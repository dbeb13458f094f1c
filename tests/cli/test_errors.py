"""What a new user got as tracebacks now ends in one `error: ...` line that says what to do."""

import json

import pytest
from huggingface_hub import HfApi

from conftest import QUICKSTART, REPO, TINY_MODEL
from rm.cli import main as cli
from rm.errors import ExportError
from rm.export.hub import push_folder

TOKEN = "hf_rmTestTokenNeverWrittenAnywhere0123"


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and "Traceback" not in "\n".join(err), err
    return err[-1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    args = ["data.synthetic.n_train=40", "data.synthetic.n_eval=12", *TINY_MODEL, "train.max_steps=2"]
    assert cli(["train", str(QUICKSTART), *args, "train.report_to=[]", f"output_dir={out}"]) == 0
    return out


@pytest.fixture
def fresh_accelerate_state():
    """The pythia config's accelerator (bf16) is set up before the model fails to load; accelerate keeps its
    state per process, so later runs in this process would inherit bf16 autocast: reset it."""
    yield
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def test_a_model_that_cannot_be_found(tmp_path, capsys, fresh_accelerate_state):
    """Offline (the suite's HF_HUB_OFFLINE=1), the shipped pythia config cannot fetch its model."""
    assert cli(["train", str(REPO / "configs" / "hh-pythia-410m.yaml"), f"output_dir={tmp_path / 'a'}"]) == 2
    line = one_line_error(capsys)
    assert "model.name_or_path=EleutherAI/pythia-410m: cannot load it" in line and "HF_HUB_OFFLINE" in line
    assert cli(["train", str(QUICKSTART), "model.name_or_path=/nonexistent", f"output_dir={tmp_path / 'b'}"]) == 2
    assert one_line_error(capsys).endswith("the path /nonexistent does not exist")
    assert cli(["eval", "--model", "/nonexistent", "--data", str(tmp_path)]) == 2
    line = one_line_error(capsys)
    assert "the path /nonexistent does not exist" in line and "Repo id" not in line


@pytest.mark.slow
def test_a_run_directory_where_an_export_is_expected_gets_a_hint(run_dir, tmp_path, capsys):
    bare = tmp_path / "bare-run"
    bare.mkdir()
    (bare / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    # `rm score` loads a run as `rm serve` does (its export, else its newest checkpoint): this one has neither
    assert cli(["score", "--model", str(bare), "--input", str(tmp_path / "x.jsonl")]) == 2
    assert f"{bare}: no weights (no export/model.safetensors and no checkpoints/" in one_line_error(capsys)
    assert cli(["eval", "--model", str(bare), "--data", str(run_dir / "data")]) == 2
    assert f"export it first (python -m rm export {bare} --out DIR)" in one_line_error(capsys)


def test_push_checks_the_token_before_exporting(run_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert cli(["export", str(run_dir), "--out", str(tmp_path / "out"), "--push-to-hub", "me/rm"]) == 2
    assert "no Hugging Face token" in one_line_error(capsys)
    assert not (tmp_path / "out").exists()  # nothing was exported first


def test_a_failed_push_is_one_line_and_a_retry_reuses_the_export(run_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    calls = []

    def offline(self, *args, **kwargs):
        raise ConnectionError("Failed to resolve 'huggingface.co'")

    monkeypatch.setattr(HfApi, "create_repo", offline)
    out = tmp_path / "out"
    argv = ["export", str(run_dir), "--out", str(out), "--push-to-hub", "me/rm"]
    assert cli(argv) == 2
    line = one_line_error(capsys)
    assert "pushing" in line and "failed (ConnectionError: Failed to resolve" in line and "run the same" in line
    assert (out / "model.safetensors").is_file()
    stamp = (out / "model.safetensors").stat().st_mtime_ns

    monkeypatch.setattr(HfApi, "create_repo", lambda self, *a, **k: calls.append("create_repo"))
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, *a, **k: calls.append(k["folder_path"]))
    assert cli(argv) == 0  # no --overwrite needed: the folder holds this very export
    assert "already holds this export" in capsys.readouterr().out
    assert calls == ["create_repo", str(out)] and (out / "model.safetensors").stat().st_mtime_ns == stamp
    # Another export into the same folder (normalised this time) still needs --overwrite.
    assert cli([*argv, "--normalize"]) == 2
    assert "pass --overwrite" in one_line_error(capsys)
    with pytest.raises(ExportError, match="failed"):
        monkeypatch.setattr(HfApi, "upload_folder", offline)
        push_folder(out, "me/rm")
    assert "reward_normalization" not in json.loads((out / "config.json").read_text())  # the first export kept


def test_train_pushes_its_export_at_the_end(tmp_path, capsys, monkeypatch):
    """export.push_to_hub: the token is checked before training; the push comes after the export."""
    args = ["data.synthetic.n_train=40", "data.synthetic.n_eval=12", *TINY_MODEL, "train.max_steps=1"]
    args += ["train.report_to=[]", "export.push_to_hub=me/rm", "export.private=true", "export.revision=v1"]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert cli(["train", str(QUICKSTART), *args, f"output_dir={tmp_path / 'a'}"]) == 2
    assert "no Hugging Face token" in one_line_error(capsys) and not (tmp_path / "a").exists()

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    calls = []
    monkeypatch.setattr(HfApi, "create_repo", lambda self, *a, **k: calls.append(("repo", k["private"])))
    monkeypatch.setattr(HfApi, "create_branch", lambda self, *a, **k: calls.append(("branch", k["branch"])))
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, *a, **k: calls.append(("upload", k["folder_path"])))
    assert cli(["train", str(QUICKSTART), *args, f"output_dir={tmp_path / 'b'}"]) == 0
    assert calls == [("repo", True), ("branch", "v1"), ("upload", str(tmp_path / "b" / "export"))]
    capsys.readouterr()
    assert cli(["train", str(QUICKSTART), "export.private=true"]) == 2
    assert "export.private/export.revision: only apply with export.push_to_hub" in capsys.readouterr().err


def test_relative_paths_that_are_not_found_say_where_they_were_looked_for(tmp_path, monkeypatch, capsys):
    """Paths in a config are read from the current directory, not the config's folder: the error says so."""
    monkeypatch.chdir(tmp_path)
    assert cli(["data", "inspect", "data/pairs.jsonl"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("error: data source not found: data/pairs.jsonl: ")
    assert line.endswith(f"(a relative path, in a config too, is read from the current directory, {tmp_path})")
    assert cli(["score", "--model", "runs/x/export", "--input", "x.jsonl"]) == 2
    assert one_line_error(capsys).endswith(
        f"does not exist (a relative path, in a config too, is read from the current directory, {tmp_path}))"
    )
