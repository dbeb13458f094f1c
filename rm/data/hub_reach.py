"""A Hugging Face Hub that cannot be reached fails at once, in one line, instead of after a minute of retries.

huggingface_hub retries a refused or unresolvable connection five times with backoff (1+2+4+8+8 s) for
each file transformers asks for: a run naming a Hub model on a machine without network waited 30-56 s
and printed 45 warning lines before transformers said it "couldn't connect". `fail_fast()` gives
huggingface_hub (through its public `set_client_factory`) its usual client plus one request hook: the first
request to a host tries a plain TCP connection to it, and where that fails, every request to that host
raises `HubUnreachable`, an `OfflineModeIsEnabled`, the one error huggingface_hub neither retries nor logs
and that sends `hf_hub_download` to the local cache, as `HF_HUB_OFFLINE=1` does. So a cached model still
loads, and an uncached one fails within a second; `unreachable()` then lets the error say why and what to do.
"""

from __future__ import annotations

import os
import socket
import urllib.request
from urllib.parse import urlsplit

_reached: dict[tuple[str, int], str] = {}
"""(host, port) -> "" where a connection was made, else why it failed (one probe per host and process)."""


def hub_offline() -> bool:
    """Whether the user set HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE), as huggingface_hub reads it."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in ("1", "ON", "YES", "TRUE")


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def unreachable() -> str:
    """Why the Hub could not be reached in this process ("" where it was, or was never asked)."""
    return next((f"{host}:{port}: {why}" for (host, port), why in _reached.items() if why), "")


def probe(host: str, port: int, timeout: float = 5.0) -> str:
    """Empty where a TCP connection to host:port opens within `timeout` seconds, else the reason."""
    if (host, port) not in _reached:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            _reached[host, port] = ""
        except OSError as e:
            _reached[host, port] = e.strerror or type(e).__name__
    return _reached[host, port]


def fail_fast() -> None:
    """Make huggingface_hub give up at once on a host it cannot connect to (a no-op under HF_HUB_OFFLINE)."""
    if hub_offline():
        return
    try:  # the default factory is not public API: where a release moves it, keep the library's own behaviour
        from huggingface_hub import set_client_factory
        from huggingface_hub.errors import OfflineModeIsEnabled
        from huggingface_hub.utils._http import default_client_factory
    except ImportError:
        return

    class HubUnreachable(OfflineModeIsEnabled):
        """The Hub's host refused or could not be found: huggingface_hub falls back to the local cache."""

    def check(request) -> None:
        if urllib.request.getproxies().get(request.url.scheme):  # through a proxy: the proxy decides
            return
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        why = probe(request.url.host, port)
        if why:
            raise HubUnreachable(f"cannot reach {request.url.host}:{port} ({why})")

    def client():
        session = default_client_factory()
        session.event_hooks = {**session.event_hooks, "request": [check, *session.event_hooks["request"]]}
        return session

    set_client_factory(client)


def hub_advice(name: str, what: str) -> str:
    """What to do about a Hub `name` (a model, tokenizer or dataset) that could not be loaded because the Hub
    could not be reached in this process; "" where it was not that."""
    why = unreachable()
    if why:
        host = urlsplit(endpoint()).netloc
        return (
            f"the Hub ({host}) cannot be reached ({why.split(': ', 1)[-1]}) and {name} is not in the local cache: "
            f"give a local path to the {what}, or download it where the Hub is reachable and set HF_HUB_OFFLINE=1"
        )
    return ""
