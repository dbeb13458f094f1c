"""Pushing an export folder to the Hugging Face Hub with `huggingface_hub`.

The token is never handled here: `HfApi` finds it itself (the `HF_TOKEN` environment variable, or
the login stored by `hf auth login`), so it is not passed around, logged, or written anywhere. The
pushed revision ends up holding exactly the exported files: remote files the export does not have
(say, an eval.json left from an earlier push of other weights) are deleted in the same commit.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rm.errors import ExportError

log = logging.getLogger("rm")


def check_repo_id(repo_id: str) -> None:
    """Fail before the export, not after it, on a name the Hub would refuse."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise ExportError(f"--push-to-hub {repo_id!r}: {e}") from None


def check_push(repo_id: str) -> None:
    """Everything a push needs that can be checked without the network: a valid name and a token.
    Called before the export, which can take minutes (`--normalize` scores every training pair)."""
    from huggingface_hub import get_token

    check_repo_id(repo_id)
    if get_token() is None:
        raise ExportError("no Hugging Face token: set HF_TOKEN or run `hf auth login` before --push-to-hub")


def push_folder(folder: str | Path, repo_id: str, *, private: bool = False, revision: str | None = None) -> str:
    """Create the repo if needed (and the branch `revision`), upload `folder`; return the commit URL."""
    check_push(repo_id)
    try:
        return _push(folder, repo_id, private, revision)
    except Exception as e:  # noqa: BLE001 - network, permission or Hub errors: one line, the export kept
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ExportError(
            f"pushing {folder} to {repo_id} failed ({type(e).__name__}: {first}); the export is kept"
        ) from None


def _push(folder: str | Path, repo_id: str, private: bool, revision: str | None) -> str:
    from huggingface_hub import HfApi

    api = HfApi()
    # private=None leaves the visibility to the Hub's default (and an existing repo's as it is).
    api.create_repo(repo_id, repo_type="model", private=True if private else None, exist_ok=True)
    if revision and revision != "main":
        api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
    info = api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        repo_type="model",
        revision=revision,
        commit_message="Upload reward model exported by rm",
        delete_patterns="*",  # files already uploaded in this commit are kept; .gitattributes always is
    )
    url = getattr(info, "commit_url", None) or f"https://huggingface.co/{repo_id}"
    log.info("pushed %s to %s%s", folder, repo_id, f" (revision {revision})" if revision else "")
    return url
