"""`python -m rm serve MODEL`: a reward server for RL loops (rm/serve/), rewards equal to `rm score`'s."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields

from rm.config.flags import add_flags, add_settings, option
from rm.serve.serve_config import ServeConfig


@dataclass(frozen=True)
class ServeFlags(ServeConfig):
    """`rm serve`'s options: the server's settings (rm/serve/serve_config.py) and the API key, which the
    settings never hold (they are printed and handed to worker processes)."""

    api_key: str | None = option(None)
    """require `Authorization: Bearer KEY` on every route but /health (prefer the RM_API_KEY environment
    variable: a flag is visible to other users in the process list)"""


def add(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a reward model over HTTP: /score, /score_groups (a rollout group's prompt computed once), "
        "/get_reward (OpenRLHF), /score_steps (a process reward per step), /health, /info",
        description="Serve MODEL over HTTP with the rewards `rm score` gives. Concurrent requests are coalesced "
        "into token-budgeted batches; a group's responses share one computation of their prompt. Binds 127.0.0.1 "
        "unless --host says otherwise; any other address needs an API key (RM_API_KEY or --api-key). SIGTERM or "
        "Ctrl-C finishes the requests in flight (for up to --drain-seconds) and exits 0. --ensemble A B C serves "
        "several models as one (their mean reward, std and conservative reward). Options may also be given as "
        "key=value.",
    )
    add_flags(p, ServeFlags)
    add_settings(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rm.config.flags import settle
    from rm.serve.launch import serve
    from rm.serve.serve_config import api_key, auth_warning

    flags = settle(overrides_apart(args), ServeFlags)
    cfg = ServeConfig(**{f.name: getattr(flags, f.name) for f in fields(ServeConfig)})
    cfg.check()
    key = api_key(flags.api_key)
    warning = auth_warning(cfg, key)  # before the model loads: a refused bind costs no minutes
    if warning:
        print(warning, file=sys.stderr)
    return serve(cfg, key if cfg.auth else None, announce=lambda line: print(line, flush=True))


def overrides_apart(args: argparse.Namespace) -> argparse.Namespace:
    """`--ensemble A B C` takes every word after it, and MODEL is optional beside it, so a `key=value` there (no
    model's name has "=" unless it is a folder that exists) is an override, as `rm eval --model A B` reads one."""
    from pathlib import Path

    def is_setting(word: str) -> bool:
        return "=" in word and not Path(word).expanduser().exists()

    words = [*args.ensemble, *([args.model] if args.model else [])]
    settings = [w for w in words if is_setting(w)]
    ensemble = [w for w in args.ensemble if not is_setting(w)]
    model = "" if not args.model or is_setting(args.model) else args.model
    return argparse.Namespace(**{**vars(args), "settings": [*settings, *args.settings], "ensemble": ensemble,
                                 "model": model})  # fmt: skip
