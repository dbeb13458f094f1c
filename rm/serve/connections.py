"""The server's side of each TCP connection: a cap on how many are open, and a deadline for each request's head.

uvicorn (h11) keeps a connection for as long as its client likes until the first request's head has arrived
(its keep-alive timeout starts only after a response, and any byte cancels it), and accepts connections until the
process runs out of file descriptors. Fifty clients that connect and send nothing then exhaust a low open-file
limit (ulimit -n) and hold SIGTERM's drain. This protocol, uvicorn's own with two guards:

- past --max-connections open connections a new one is answered 503 and closed at once;
- a connection that has not sent a whole request head within --read-timeout of opening (or of its previous
  answer) is answered 408 and closed. The body has its own deadline, in the app (rm/serve/app.py `read_body`).

The cap is lowered to what the open-file limit leaves (`connection_cap`), after raising the soft limit toward the
hard one where allowed.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from rm.errors import ConfigError

log = logging.getLogger("rm.serve")
SPARE_FILES = 16
"""Descriptors kept free beyond those open at the start (a log file, an accept in progress, a tokenizer file)."""


def raw_reply(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP response in the API's error shape, for a connection that never reached the app."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def guarded_protocol(max_connections: int, read_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the connection cap and the request-head deadline."""
    full = raw_reply(
        503, "Service Unavailable", f"too many connections (this server's --max-connections {max_connections})"
    )
    late = raw_reply(
        408, "Request Timeout", f"no request arrived within this server's --read-timeout {read_timeout:g} s"
    )

    class Guarded(H11Protocol):
        head_timer: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:  # this connection is already among them
                transport.write(full)
                transport.close()
                return
            self._expect_head()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._expect_head()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            super().connection_lost(exc)

        def _expect_head(self) -> None:
            """Close the connection unless a new request head arrives within read_timeout (a pipelined one that
            is already here has started its cycle: the check sees a new cycle and does nothing)."""
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(read_timeout, self._head_late, self.cycle)

        def _head_late(self, cycle_before: Any) -> None:
            if self.cycle is cycle_before and not self.transport.is_closing():
                self.transport.write(late)
                self.transport.close()

    return Guarded


def connection_cap(wanted: int) -> int:
    """--max-connections, lowered to what the open-file limit leaves free beyond the descriptors open now and
    SPARE_FILES (the soft limit is first raised toward the hard one where the system allows)."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no limit to read
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = open_files()
    needed = in_use + SPARE_FILES + wanted
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    cap = soft - in_use - SPARE_FILES
    if cap < 1:
        raise ConfigError(f"the open-file limit ({soft}, ulimit -n) leaves no descriptor for a connection: raise it")
    log.warning("--max-connections %d lowered to %d: the open-file limit is %d (ulimit -n)", wanted, cap, soft)
    return cap


def open_files() -> int:
    """Descriptors this process has open (Linux's /proc; elsewhere a guess of 64)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64
