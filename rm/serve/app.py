"""The HTTP side of `rm serve`: Starlette routes in front of one model thread (rm/serve/batcher.py).

The event loop only moves bytes: a request's body is read (refused past --max-body-bytes), then decoded, checked,
rendered and tokenized on one preparation thread (rm/serve/bodies.py: a bad request is a 4xx there and never
reaches a batch), then queued for the model thread and awaited. One thread for preparation keeps the tokenizer
to one caller at a time; one for the model keeps one forward on the device at a time.

Routes (the contract the client, rm/client/, is written against): POST /score, /score_groups, /get_reward
(OpenRLHF's remote reward protocol), GET /health, /info. Errors are `{"error": "<one line>"}`; a 500 also carries
`request_id`, which the log line about it names. With an API key every route but /health needs
`Authorization: Bearer KEY`; the key is compared in constant time and never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import rm
from rm.serve.batch_plan import MAX_ROW, Output
from rm.serve.batcher import Batcher, ModelFailed
from rm.serve.bodies import Prepared, RequestError, prepare
from rm.serve.scorer import Scorer
from rm.serve.serve_config import ServeConfig

log = logging.getLogger("rm.serve")
OPEN_PATHS = ("/health",)
UNAUTHORIZED = "missing or wrong API key"


class KeyCheck:
    """ASGI middleware: every path but /health needs the bearer key (also unknown paths: no route is revealed)."""

    def __init__(self, app: Any, key: str | None):
        self.app = app
        self.expected = f"Bearer {key}".encode() if key else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if self.expected is not None and scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = JSONResponse({"error": UNAUTHORIZED}, 401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(scorer: Scorer, cfg: ServeConfig, key: str | None = None, worker: int = 0) -> Starlette:
    """The application for one server process holding `scorer`; `key` None serves without authentication."""
    batcher = Batcher(
        scorer.forward,
        scorer.layout_name == "shared",
        cfg.max_batch_tokens,
        cfg.max_wait_ms,
        max(scorer.max_length, MAX_ROW),
        cached=scorer.groups is not None,
    )
    prep = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rm-serve-prepare")
    headers = {"x-rm-worker": str(worker)}

    def reply(content: dict, status: int = 200) -> JSONResponse:
        return JSONResponse(content, status, headers=headers)

    async def post(request: Request, route: str) -> JSONResponse:
        request_id = uuid.uuid4().hex[:12]
        try:
            body = await read_body(request, cfg.max_body_bytes)
            loop = asyncio.get_running_loop()
            prepared = await loop.run_in_executor(prep, prepare, route, body, scorer, cfg.max_texts, cfg.on_too_long)
            raw = prepared.answers(await batcher.score(request_id, prepared.jobs))
        except RequestError as e:
            return reply({"error": e.message}, e.status)
        except ClientDisconnect:  # gone before its body arrived: nobody reads this answer
            return reply({"error": "the client disconnected while sending the body"}, 400)
        except ModelFailed:
            message = f"the model failed on this request's batch (request {request_id}; see the server log)"
            return reply({"error": message, "request_id": request_id}, 500)
        except Exception as e:  # noqa: BLE001 - a bug answers 500 with an id to find its traceback by
            log.error("request %s failed: %s", request_id, e, exc_info=True)
            return reply({"error": f"internal error (request {request_id})", "request_id": request_id}, 500)
        return reply(answer(route, prepared, raw, scorer, request_id))

    async def health(request: Request) -> JSONResponse:
        return reply({"status": "ok"})

    async def info(request: Request) -> JSONResponse:
        return reply(
            {
                "model": cfg.model,
                "max_length": scorer.max_length,
                "truncation_side": "left",
                "normalize": scorer.norm,
                "attributes": scorer.attributes,
                "layout": scorer.layout_name,
                "group_layout": scorer.group_layout_name,
                "busy_seconds": round(batcher.busy, 3),
                "scored": batcher.scored,
                "tokens": batcher.tokens,
                "on_too_long": cfg.on_too_long,
                "max_texts": cfg.max_texts,
                "max_body_bytes": cfg.max_body_bytes,
                "version": rm.__version__,
            }
        )

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 500)
        return reply({"error": str(getattr(exc, "detail", "error"))}, status)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        batcher.start()
        try:
            yield
        finally:  # after uvicorn has answered every request in flight: nothing is left queued
            batcher.stop()
            prep.shutdown(wait=True)

    def endpoint(route: str):
        async def handle(request: Request) -> JSONResponse:
            return await post(request, route)

        return handle

    routes = [
        *(Route(f"/{r}", endpoint(r), methods=["POST"]) for r in ("score", "score_groups", "get_reward")),
        Route("/health", health, methods=["GET"]),
        Route("/info", info, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    app.state.batcher = batcher  # tests read how requests were coalesced
    app.add_middleware(KeyCheck, key=key)
    return app


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is known to be over `limit` bytes: by Content-Length before reading,
    else while reading, so an oversized body is never held whole."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise RequestError(413, f"the body is {int(length)} bytes, over this server's --max-body-bytes {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the body is over this server's --max-body-bytes {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


def answer(route: str, prepared: Prepared, raw: list[list[Output]], scorer: Scorer, request_id: str) -> dict:
    """The response body: one reward per item (one list per group for /score_groups), which were cut, and with
    attribute outputs `attributes` parallel to `rewards` ({name: value} per text)."""
    outputs = [[scorer.outputs(r) for r in item] for item in raw]
    rewards = [[reward for reward, _ in item] for item in outputs]
    attributes = [[values for _, values in item] for item in outputs]
    truncated = [[s.truncated for s in seqs] for seqs in prepared.items]
    if any(r is None for item in rewards for r in item):
        log.warning("request %s: some rewards are not finite (the model overflows): sent as null", request_id)
    extra = {"attributes": attributes} if scorer.attributes else {}
    if prepared.grouped:
        return {"rewards": rewards, "truncated": truncated, **extra}
    flat, cut = [item[0] for item in rewards], [item[0] for item in truncated]
    if route == "get_reward":  # what OpenRLHF's client reads: rewards, scores (else rewards), extra_logs
        return {"rewards": flat, "scores": flat, "extra_logs": {}, "truncated": cut}
    extra = {"attributes": [item[0] for item in attributes]} if scorer.attributes else {}
    return {"rewards": flat, "truncated": cut, **extra}
