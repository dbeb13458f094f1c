"""Pushing to the Hub, which cannot be reached here: the calls made to huggingface_hub are recorded
(HfApi's methods replaced) and checked, and the token must appear in no file, log or output."""

import logging

import pytest
from huggingface_hub import HfApi

from conftest import tiny_model
from rm.config import RunConfig
from rm.errors import ExportError
from rm.export.folder import Weights, export_model
from rm.export.hub import push_folder

TOKEN = "hf_rmTestTokenNeverWrittenAnywhere0123"


@pytest.fixture
def hub_calls(monkeypatch):
    """Replace the network-facing HfApi methods with recorders (and refuse any other request)."""
    calls = []

    def recorder(name):
        def record(self, *args, **kwargs):
            calls.append((name, args, kwargs))

        return record

    for name in ("create_repo", "create_branch", "upload_folder"):
        monkeypatch.setattr(HfApi, name, recorder(name))
    monkeypatch.setattr(HfApi, "whoami", lambda *a, **k: pytest.fail("no other Hub call expected"))
    return calls


def every_file_text(root) -> str:
    return "\n".join(p.read_bytes().decode("latin-1") for p in root.rglob("*") if p.is_file())


@pytest.fixture
def folder(tokenizer, tmp_path):
    return export_model(tiny_model(tokenizer), tokenizer, tmp_path / "export", RunConfig(), Weights(1, 1))


def test_push_creates_the_repo_and_branch_then_uploads_the_folder(folder, hub_calls, monkeypatch, caplog, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    caplog.set_level(logging.DEBUG)
    push_folder(folder, "someone/tiny-rm", private=True, revision="step-1")
    assert [c[0] for c in hub_calls] == ["create_repo", "create_branch", "upload_folder"]
    (_, args, kwargs) = hub_calls[0]
    assert args == ("someone/tiny-rm",) and kwargs == {"repo_type": "model", "private": True, "exist_ok": True}
    assert hub_calls[1][2] == {"branch": "step-1", "repo_type": "model", "exist_ok": True}
    upload = hub_calls[2][2]
    assert upload["repo_id"] == "someone/tiny-rm" and upload["folder_path"] == str(folder)
    assert upload["revision"] == "step-1" and upload["delete_patterns"] == "*"
    assert all("token" not in kwargs for _, _, kwargs in hub_calls)  # HfApi resolves it itself
    out = capsys.readouterr()
    assert TOKEN not in caplog.text + out.out + out.err + every_file_text(folder)


def test_push_to_main_makes_no_branch_and_leaves_visibility_to_the_hub(folder, hub_calls, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    push_folder(folder, "someone/tiny-rm")
    assert [c[0] for c in hub_calls] == ["create_repo", "upload_folder"]
    assert hub_calls[0][2]["private"] is None and hub_calls[1][2]["revision"] is None


def test_no_token_or_a_bad_repo_id_stops_before_any_call(folder, hub_calls, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored login either
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    with pytest.raises(ExportError, match="no Hugging Face token: set HF_TOKEN"):
        push_folder(folder, "someone/tiny-rm")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with pytest.raises(ExportError, match="--push-to-hub 'not a/valid//id'"):
        push_folder(folder, "not a/valid//id")
    assert hub_calls == []
