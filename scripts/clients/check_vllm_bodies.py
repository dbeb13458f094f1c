"""rm serve's /classify and /pooling held to vLLM's own protocol classes (vLLM 0.34.0, its pydantic models).

Runs in a venv where `pip install --no-deps vllm==0.34.0` is installed with what its protocol modules import (vLLM's
wheels need CUDA to run the engine, not to import vllm/entrypoints/pooling/*/protocol.py; see check_clients.sh);
rm is not installed there. Two modes:

    python check_vllm_bodies.py --bodies FILE   # FILE: JSON [{"what", "route", "body"}, ...] that a test recorded
    python check_vllm_bodies.py WORK_DIR        # make clients: the live `rm serve` of each export in served.json

--bodies: each `request` must validate as vLLM's ClassificationRequest / PoolingRequest, each `refused` request must
be refused by them too, each `response` must validate as ClassificationResponse / PoolingResponse and each `error`
as ErrorResponse, with nothing filled in by a default (the validated model dumps back to the same JSON). Prints the
failures, one JSON line each, and `N bodies checked` last; exit 1 on any failure.

WORK_DIR: for each export, the HH cases of make_exports.py sent as vLLM's own request models build them (the texts
as one `input`, then each conversation as `messages`) to /classify and /pooling; the answers must validate as vLLM's
response models, and `probs[0]` / `data[0]` must equal `rm score` (check_client.py's reference). One row per path
for scripts/clients/table.py, in check_client.py's format.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import TypeAdapter, ValidationError
from vllm.entrypoints.pooling.classify.protocol import ClassificationRequest, ClassificationResponse
from vllm.entrypoints.pooling.pooling.protocol import PoolingRequest, PoolingResponse
from vllm.entrypoints.serve.engine.protocol import ErrorResponse

REQUESTS = {"classify": TypeAdapter(ClassificationRequest), "pooling": TypeAdapter(PoolingRequest)}
RESPONSES = {"classify": ClassificationResponse, "pooling": PoolingResponse}


def problem(what: str, route: str, body: dict) -> str:
    """What is wrong with one recorded body by vLLM's classes, or ""."""
    try:
        if what == "refused":
            try:
                REQUESTS[route].validate_python(body)
            except Exception:  # noqa: BLE001 - pydantic's error, or vLLM's own raised from a validator
                return ""
            return "vLLM accepts this body, which rm refused"
        if what == "request":
            REQUESTS[route].validate_python(body)
            return ""
        model = RESPONSES[route] if what == "response" else ErrorResponse
        dumped = model.model_validate(body).model_dump(mode="json")
        return "" if dumped == body else f"vLLM's {model.__name__} reads it as {json.dumps(dumped)[:300]}"
    except (ValidationError, ValueError) as e:
        return f"{type(e).__name__}: {e}"[:600]


def check_bodies(path: Path) -> int:
    bodies = json.loads(path.read_text())
    bad = 0
    for b in bodies:
        why = problem(b["what"], b["route"], b["body"])
        if why:
            bad += 1
            print(json.dumps({"what": b["what"], "route": b["route"], "body": b["body"], "problem": why}))
    print(f"{len(bodies)} bodies checked, {bad} failed")
    return 1 if bad else 0


def served(work: Path) -> None:
    """The rows of the live check (make clients)."""
    from importlib.metadata import version

    import httpx

    sys.path.insert(0, str(Path(__file__).parent))
    from check_client import KINDS, load, served_url

    label = f"vllm {version('vllm')} protocol -> rm serve"
    for kind in KINDS:
        cases, ref = load(work, kind)
        url = served_url(work / kind / "export")
        texts = [c[side] for c in cases for side in ("chosen", "rejected")]
        chats = [c["prompt_messages"] + [c[f"{side}_message"]] for c in cases for side in ("chosen", "rejected")]
        for route, field in (("classify", "probs"), ("pooling", "data")):
            bodies = {f"/{route} input": [{"input": texts}], f"/{route} messages": [{"messages": m} for m in chats]}
            for path, requests in bodies.items():
                row = {"client": label, "kind": kind, "path": path, "n": len(texts)}
                try:
                    got = []
                    for body in requests:  # as vLLM's own request model builds it
                        sent = REQUESTS[route].validate_python(body).model_dump(mode="json", exclude_unset=True)
                        answer = httpx.post(f"{url}/{route}", json=sent, timeout=120)
                        answer.raise_for_status()
                        parsed = RESPONSES[route].model_validate(answer.json())
                        got += [getattr(item, field)[0] for item in parsed.data]
                    diff = max(abs(a - b) for a, b in zip(got, ref["reward"], strict=True))
                    print(json.dumps(row | {"max_abs_diff": diff, "diffs": {"reward": diff}, "error": ""}), flush=True)
                except Exception as e:  # noqa: BLE001 - reported in the table
                    print(json.dumps(row | {"max_abs_diff": None, "error": f"{type(e).__name__}: {e}"[:200]}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bodies"]:
        sys.exit(check_bodies(Path(sys.argv[2])))
    served(Path(sys.argv[1]))
