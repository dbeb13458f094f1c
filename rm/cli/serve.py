"""`python -m rm serve MODEL`: a reward server for RL loops (rm/serve/), rewards equal to `rm score`'s."""

from __future__ import annotations

import argparse
import sys

from rm.cli.evaluate import add_threads_arg
from rm.cli.options import add_loading_args


def add(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a reward model over HTTP: /score, /score_groups (a rollout group's prompt computed once), "
        "/get_reward (OpenRLHF), /health, /info",
        description="Serve MODEL over HTTP with the rewards `rm score` gives. Concurrent requests are coalesced "
        "into token-budgeted batches; a group's responses share one computation of their prompt. Binds 127.0.0.1 "
        "unless --host says otherwise; any other address needs an API key (RM_API_KEY or --api-key). SIGTERM or "
        "Ctrl-C finishes the requests in flight (for up to --drain-seconds) and exits 0.",
    )
    p.add_argument("model", help="an rm export, a run directory, or a sequence-classification folder or Hub name")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one and prints it)")
    p.add_argument(
        "--api-key",
        default=None,
        help="require `Authorization: Bearer KEY` on every route but /health (prefer the RM_API_KEY environment "
        "variable: a flag is visible to other users in the process list)",
    )
    p.add_argument("--no-auth", action="store_true", help="serve a non-loopback --host without a key (warns)")
    p.add_argument("--workers", type=int, default=1, help="processes on the one port, each holding the model")
    p.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda, cuda:N or auto (default: the GPU when there is one); with cuda, worker i takes GPU i",
    )
    p.add_argument(
        "--max-batch-tokens", type=int, default=16384, help="token slots of one forward (rows x width), default 16384"
    )
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        help="how long the first queued request waits for others to share its batch (default 5)",
    )
    p.add_argument("--max-texts", type=int, default=1024, help="texts or responses per request (default 1024)")
    p.add_argument("--max-body-bytes", type=int, default=8 << 20, help="bytes per request body (default 8 MiB)")
    p.add_argument(
        "--on-too-long",
        choices=["truncate", "error"],
        default="truncate",
        help="a text over max_length: cut from the left by rm's rule and flagged (default), or refused (422)",
    )
    p.add_argument("--normalize", action="store_true", help="(reward - mean) / std with the export's recorded stats")
    p.add_argument(
        "--no-prefix-cache",
        dest="prefix_cache",
        action="store_false",
        help="score groups in the shared layout's packed rows, not on each prompt's cached keys and values",
    )
    add_loading_args(p)
    p.add_argument(
        "--allow-host",
        dest="allow_hosts",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests whose Host header is NAME (repeatable; * for any). Default: a loopback server "
        "answers only localhost, 127.x.x.x and [::1], so that no web page can reach it by DNS rebinding; a "
        "non-loopback one answers any name",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=60.0,
        help="seconds a client has to send a request's head, and again its body, before a 408 (default 60)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=512,
        help="open connections per worker; more are answered 503 (default 512, lowered to fit the open-file limit)",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        help="on SIGTERM, how long requests in flight may take before they are answered 503 (default 30)",
    )
    p.add_argument("--access-log", action="store_true", help="log one line per request (paths, never headers)")
    add_threads_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.serve.launch import serve
    from rm.serve.serve_config import ServeConfig, api_key, auth_warning

    cfg = ServeConfig(
        model=args.model,
        host=args.host,
        port=args.port,
        max_batch_tokens=args.max_batch_tokens,
        max_wait_ms=args.max_wait_ms,
        max_texts=args.max_texts,
        max_body_bytes=args.max_body_bytes,
        on_too_long=args.on_too_long,
        workers=args.workers,
        device=args.device,
        trust_remote_code=args.trust_remote_code,
        normalize=args.normalize,
        prefix_cache=args.prefix_cache,
        max_length=args.max_length,
        dtype=args.dtype,
        num_threads=args.num_threads,
        auth=not args.no_auth,
        access_log=args.access_log,
        read_timeout=args.read_timeout,
        max_connections=args.max_connections,
        drain_seconds=args.drain_seconds,
        allow_hosts=tuple(args.allow_hosts),
    )
    cfg.check()
    key = api_key(args.api_key)
    warning = auth_warning(cfg, key)  # before the model loads: a refused bind costs no minutes
    if warning:
        print(warning, file=sys.stderr)
    return serve(cfg, key if cfg.auth else None, announce=lambda line: print(line, flush=True))
