"""Who may talk to `rm serve`: ASGI middleware that answers a request before any route sees it.

- HostCheck: a loopback server answers only requests addressed to a loopback name (localhost, 127.x.x.x, [::1])
  or a name given with --allow-host. Without it, a web page whose DNS name is rebound to 127.0.0.1 could have
  the browser of a user on this machine read /info and post texts (DNS rebinding), since a loopback bind needs
  no key.
- KeyCheck: with an API key every path but /health needs `Authorization: Bearer KEY` (unknown paths too: no route
  is revealed). The key is compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from typing import Any

from starlette.responses import JSONResponse

from rm.serve.serve_config import ServeConfig

OPEN_PATHS = ("/health",)
UNAUTHORIZED = "missing or wrong API key"


class HostCheck:
    """Refuse (400) a request whose Host header names this server by a name it does not answer to."""

    def __init__(self, app: Any, cfg: ServeConfig):
        self.app = app
        self.cfg = cfg

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not self.cfg.host_allowed(host):
                shown = ascii(host)[1:-1][:100] or "(none)"
                message = (
                    f"Host {shown} is not a name of this server: it answers localhost, 127.x.x.x and [::1] only "
                    "(rm serve --allow-host NAME adds a name)"
                )
                await JSONResponse({"error": message}, 400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class KeyCheck:
    """Every path but /health needs the bearer key."""

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
