"""The HTTP side of `rm serve`: Starlette routes in front of one model thread (rm/serve/batcher.py).

The event loop only moves bytes: a request's body is read (refused past --max-body-bytes, or when it has not
arrived within --read-timeout), then decoded, checked, rendered and tokenized on one preparation thread in turns
with the other requests (rm/serve/preparer.py, rm/serve/bodies.py: a bad request is a 4xx there and never
reaches a batch), then queued for the model thread and awaited. One thread for preparation keeps the tokenizer
to one caller at a time; one for the model keeps one forward on the device at a time. While a request is
prepared and scored the server watches its connection: a client that has gone has its work dropped, unscored.

Routes (the contract the client, rm/client/, is written against): POST /score, /score_groups, /get_reward
(OpenRLHF's remote reward protocol), /score_steps (a process reward per step: rm/serve/step_bodies.py), /classify and
/pooling (vLLM's pooling API: rm/serve/vllm_api/), GET /health, /info. Errors are `{"error": "<one line>"}`, on
vLLM's routes in vLLM's shape; a 500 also carries `request_id`, which the log line about it names. Who may call is
rm/serve/guards.py's (the Host name, the key).
/health answers 503 once a thread the server needs has died, and the server then stops (exit 1).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import rm
from rm.serve.batch_plan import MAX_ROW, Output
from rm.serve.batcher import Batcher, ModelFailed, ModelStopped
from rm.serve.bodies import Prepared, RequestError, preparing
from rm.serve.guards import HostCheck, KeyCheck
from rm.serve.preparer import Preparer, PreparerStopped
from rm.serve.scorer import Scorer
from rm.serve.serve_config import ServeConfig
from rm.serve.step_bodies import preparing_steps
from rm.serve.vllm_api.vllm_answers import error_body, vllm_answer
from rm.serve.vllm_api.vllm_requests import VllmError, preparing_vllm

log = logging.getLogger("rm.serve")

POSTS = ("score", "score_groups", "get_reward", "score_steps", "classify", "pooling")
"""The POST routes; /info lists them."""
VLLM_POSTS = ("classify", "pooling")
"""The routes with vLLM's bodies, and vLLM's error shape."""


def build_app(
    scorer: Scorer,
    cfg: ServeConfig,
    key: str | None = None,
    worker: int = 0,
    on_fatal: Callable[[], None] | None = None,
    after_batch: Callable[[], None] | None = None,
) -> Starlette:
    """The application for one server process holding `scorer`; `key` None serves without authentication.
    `on_fatal` is called (from the dying thread) when the model or preparation thread dies: the server stops;
    `after_batch` by the model thread after each batch."""
    routes = Routes(scorer, cfg, worker, on_fatal, after_batch)
    posts = [Route(f"/{r}", routes.endpoint(r), methods=["POST"]) for r in POSTS]
    gets = [Route("/health", routes.health, methods=["GET"]), Route("/info", routes.info, methods=["GET"])]
    app = Starlette(
        routes=[*posts, *gets], lifespan=routes.lifespan, exception_handlers={HTTPException: routes.http_error}
    )
    app.state.batcher = routes.batcher  # tests read how requests were coalesced
    app.state.preparer = routes.preparer
    app.add_middleware(KeyCheck, key=key)
    app.add_middleware(HostCheck, cfg=cfg)  # added last, runs first: a wrong Host learns nothing, not even 401
    return app


class Routes:
    """What the routes of one server process share: its scorer, its two threads (preparation, model) and the
    requests SIGTERM's drain cut off."""

    def __init__(self, scorer: Scorer, cfg: ServeConfig, worker: int, on_fatal: Callable[[], None] | None,
                 after_batch: Callable[[], None] | None = None):  # fmt: skip
        stopping = (lambda _error: on_fatal()) if on_fatal is not None else None
        self.scorer, self.cfg = scorer, cfg
        self.batcher = Batcher(
            scorer.forward,
            scorer.layout_name == "shared",
            cfg.max_batch_tokens,
            cfg.max_wait_ms,
            max(scorer.max_length, MAX_ROW),
            cached=scorer.groups is not None,
            on_fatal=stopping,
            threads=scorer.batch_threads(cfg.batch_threads),
            after_batch=after_batch or (lambda: None),
        )
        self.preparer = Preparer(on_fatal=stopping)
        self.headers = {"x-rm-worker": str(worker)}
        self.drained: list[str] = []  # requests still unanswered when SIGTERM's drain ran out

    def reply(self, content: dict, status: int = 200) -> JSONResponse:
        return JSONResponse(content, status, headers=self.headers)

    def endpoint(self, route: str) -> Callable[[Request], Awaitable[JSONResponse]]:
        async def handle(request: Request) -> JSONResponse:
            return await self.post(request, route)

        return handle

    async def scored(self, route: str, body: bytes, request_id: str) -> dict:
        """The one recipe of every POST route: prepare (check, render, tokenize), score in batches, answer."""
        cfg = self.cfg
        if route in VLLM_POSTS:
            asked = await self.preparer.run(preparing_vllm(route, body, self.scorer, cfg.max_texts, cfg.on_too_long))
            raw = asked.prepared.answers(await self.batcher.score(request_id, asked.prepared.jobs))
            return vllm_answer(asked, raw, self.scorer, cfg.name, request_id)
        if route == "score_steps" and self.scorer.ensemble is not None:
            raise RequestError(400, STEPS_REFUSED)
        if route == "score_steps":
            steps = await self.preparer.run(preparing_steps(body, self.scorer, cfg.max_texts, cfg.on_too_long))
            return steps.answer(await self.batcher.score(request_id, steps.prepared.jobs), request_id)
        prepared = await self.preparer.run(preparing(route, body, self.scorer, cfg.max_texts, cfg.on_too_long))
        raw = prepared.answers(await self.batcher.score(request_id, prepared.jobs))
        return answer(route, prepared, raw, self.scorer, request_id)

    async def post(self, request: Request, route: str) -> JSONResponse:
        request_id, cfg = uuid.uuid4().hex[:12], self.cfg

        def reply(content: dict, status: int = 200, param: str | None = None) -> JSONResponse:
            if status != 200 and route in VLLM_POSTS:  # vLLM's error shape, request_id kept beside it
                ids = {"request_id": content["request_id"]} if "request_id" in content else {}
                content = error_body(status, content["error"], param) | ids
            return self.reply(content, status)

        try:
            body = await read_body(request, cfg.max_body_bytes, cfg.read_timeout)
            result = await unless_gone(request.receive, self.scored(route, body, request_id))
        except RequestError as e:
            return reply({"error": e.message}, e.status, e.param if isinstance(e, VllmError) else None)
        except ClientDisconnect:  # gone before its body arrived: nobody reads this answer
            return reply({"error": "the client disconnected while sending the body"}, 400)
        except (ModelStopped, PreparerStopped):
            return reply({"error": f"the server is stopping: {self.dead()}", "request_id": request_id}, 503)
        except ModelFailed:
            message = f"the model failed on this request's batch (request {request_id}; see the server log)"
            return reply({"error": message, "request_id": request_id}, 500)
        except asyncio.CancelledError:  # SIGTERM's drain ran out (uvicorn cancels): an answer, not a traceback
            self.drained.append(request_id)
            message = f"the server stopped before this request was answered (--drain-seconds {cfg.drain_seconds:g})"
            return reply({"error": message, "request_id": request_id}, 503)
        except Exception as e:  # noqa: BLE001 - a bug answers 500 with an id to find its traceback by
            log.error("request %s failed: %s", request_id, e, exc_info=True)
            return reply({"error": f"internal error (request {request_id})", "request_id": request_id}, 500)
        if result is None:  # the client has gone: its work was dropped, and nobody reads this answer
            return reply({"error": "the client disconnected before its answer"}, 400)
        return reply(result)

    def dead(self) -> str:
        """What killed a thread this server needs, or "" while both run."""
        for name, error in (("model", self.batcher.died), ("preparation", self.preparer.died)):
            if error is not None:
                return f"its {name} thread died ({type(error).__name__}: {error})"
        return ""

    async def health(self, request: Request) -> JSONResponse:
        if self.dead():
            return self.reply({"error": f"the server is stopping: {self.dead()}"}, 503)
        return self.reply({"status": "ok"})

    async def info(self, request: Request) -> JSONResponse:
        scorer, cfg, batcher = self.scorer, self.cfg, self.batcher
        ensemble = {} if scorer.ensemble is None else {"ensemble": ensemble_info(scorer)}
        return self.reply(
            {
                "model": cfg.name,
                "max_length": scorer.max_length,
                "truncation_side": "left",
                "normalize": scorer.norm,
                "attributes": scorer.attributes,
                "layout": scorer.layout_name,
                "group_layout": scorer.group_layout_name,
                "weights": scorer.weights,
                **batcher.counters(),
                "on_too_long": cfg.on_too_long,
                "max_texts": cfg.max_texts,
                "max_body_bytes": cfg.max_body_bytes,
                "routes": [f"/{r}" for r in POSTS if not (ensemble and r == "score_steps")],
                "step_separator": scorer.step_separator,
                "version": rm.__version__,
                **ensemble,
            }
        )

    async def http_error(self, request: Request, exc: Exception) -> JSONResponse:
        status, message = getattr(exc, "status_code", 500), str(getattr(exc, "detail", "error"))
        if request.url.path.strip("/") in VLLM_POSTS:  # e.g. a GET of /classify (405), in vLLM's shape
            return self.reply(error_body(status, message), status)
        return self.reply({"error": message}, status)

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.batcher.start()
        self.preparer.start()
        try:
            yield
        finally:  # after uvicorn has answered every request in flight: what is queued is theirs, or dropped
            if self.drained:
                log.warning(
                    "%d request(s) still in flight when --drain-seconds %g ran out were answered 503",
                    len(self.drained),
                    self.cfg.drain_seconds,
                )
            self.preparer.stop()
            self.batcher.stop()


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The body, refused (413) as soon as it is known to be over `limit` bytes: by Content-Length before reading,
    else while reading, so an oversized body is never held whole; refused (408) when it has not all arrived
    within `timeout` seconds, so a client that trickles its body holds neither a connection nor SIGTERM's drain."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise RequestError(413, f"the body is {int(length)} bytes, over this server's --max-body-bytes {limit}")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise RequestError(413, f"the body is over this server's --max-body-bytes {limit}")
                chunks.append(chunk)
    except TimeoutError:
        raise RequestError(408, f"the body did not arrive within this server's --read-timeout {timeout:g} s") from None
    return b"".join(chunks)


async def unless_gone(receive: Callable[[], Awaitable[dict]], work: Coroutine[Any, Any, dict]) -> dict | None:
    """`work`'s result, or None as soon as the client disconnects: `work` is then cancelled, which takes the
    request out of the preparation line and the model's queue, so texts nobody waits for are never scored (30
    abandoned 1,000-text requests would otherwise hold the model for every later client). Called once the body
    is read: the next ASGI message is the disconnect, which uvicorn sends when the connection closes."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(disconnected(receive))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    return task.result() if task in done else None


async def disconnected(receive: Callable[[], Awaitable[dict]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def answer(route: str, prepared: Prepared, raw: list[list[Output]], scorer: Scorer, request_id: str) -> dict:
    """The response body: one reward per item (one list per group for /score_groups), which were cut, and with
    attribute outputs `attributes` parallel to `rewards` ({name: value} per text). An ensemble's `rewards` are its
    chosen reward, with `mean`, `std`, `conservative` and `member_rewards` (per text, one per member) parallel to
    them, and on /get_reward the first three in `extra_logs` too, which OpenRLHF logs as metrics."""
    stats: dict[str, list] = {}
    if scorer.ensemble is not None:  # one call for the request's responses, then back into items
        every = iter(scorer.ensemble.combine([r for item in raw for r in item]))
        combined = [[next(every) for _ in item] for item in raw]
        outputs = [[(c.reward, c.attributes) for c in item] for item in combined]
        stats = {key: [[getattr(c, field) for c in item] for item in combined] for key, field in ENSEMBLE_FIELDS}
    else:
        outputs = [[scorer.outputs(r) for r in item] for item in raw]
    rewards = [[reward for reward, _ in item] for item in outputs]
    attributes = [[values for _, values in item] for item in outputs]
    truncated = [[g.truncated for g in item for _ in g.response_ids] for item in prepared.items]  # per text
    if any(r is None for item in rewards for r in item):
        log.warning("request %s: some rewards are not finite (the model overflows): sent as null", request_id)
    extra = {"attributes": attributes} if scorer.attributes else {}
    if prepared.grouped:
        return {"rewards": rewards, "truncated": truncated, **extra, **stats}
    flat, cut = [item[0] for item in rewards], [item[0] for item in truncated]
    stats = {key: [item[0] for item in values] for key, values in stats.items()}
    if route == "get_reward":  # what OpenRLHF's client reads: rewards, scores (else rewards), extra_logs
        logs = {f"reward_{key}": stats[key] for key in ("mean", "std", "conservative") if key in stats}
        return {"rewards": flat, "scores": flat, "extra_logs": logs, "truncated": cut, **stats}
    extra = {"attributes": [item[0] for item in attributes]} if scorer.attributes else {}
    return {"rewards": flat, "truncated": cut, **extra, **stats}


ENSEMBLE_FIELDS = (("mean", "mean"), ("std", "std"), ("conservative", "conservative"), ("member_rewards", "members"))
"""An ensemble's answer fields beside `rewards` (rm/scoring/ensemble.py's `Combined` attribute each holds)."""
STEPS_REFUSED = (
    "this server serves an ensemble, which gives rewards, not step scores: serve one process reward model for "
    "/score_steps"
)


def ensemble_info(scorer: Scorer) -> dict:
    """/info's `ensemble`: the members in order (`member_rewards` follows it), the chosen reward, k, what the
    statistics are taken over (raw or normalised rewards), and how many base models are held in memory."""
    assert scorer.ensemble is not None
    return scorer.ensemble.describe() | {"base_copies": scorer.base_copies}
