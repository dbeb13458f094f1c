"""What a reply of `rm serve` means to a client: its JSON body, or the one error every failure becomes.

One exception class for a refused request (4xx), a server fault (5xx) and a server that cannot be reached, so an
RL loop catches one thing; `status` tells them apart (None: no reply at all). A refused request is its subclass
RewardRequestError: the request itself is wrong (a lone surrogate, a text too long, a missing key), so sending it
again cannot help, whereas a fault or no reply may pass. The server words every refusal as
one line in {"error": ...} (500s add a request id, which is also in the server's log); the client keeps that line
as it is, so what a user reads is what the server said.
"""

from __future__ import annotations

from typing import Any

import httpx


class RewardServerError(Exception):
    """A request that got no rewards: the HTTP status (None when no reply came), the server's one-line message,
    and for a server fault the request id to look for in the server's log."""

    def __init__(self, status: int | None, message: str, request_id: str | None = None):
        self.status = status
        self.message = message
        self.request_id = request_id
        where = f"HTTP {status}" if status is not None else "no reply"
        super().__init__(f"{where}: {message}" + (f" (request id {request_id})" if request_id else ""))


class RewardRequestError(RewardServerError):
    """The server refused the request (HTTP 4xx), or it could not be sent as JSON at all (status None): the
    request's own fault, which a retry does not mend."""


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The bearer header `rm serve --api-key` expects; nothing without a key (a loopback server needs none)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def unreachable(url: str, error: httpx.TransportError) -> RewardServerError:
    """A connection refused, a timeout, a dropped connection: no status, and what httpx said, on one line."""
    what = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return RewardServerError(None, f"{type(error).__name__} talking to {url}" + (f": {what}" if what else ""))


def read_reply(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a 2xx reply; anything else raises RewardServerError with the server's own line.

    A body that is not rm's {"error": ...} (a proxy's HTML page, an older server) gives its first line instead,
    cut at 200 characters, so the message stays one line."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.is_success:
        if not isinstance(body, dict):
            raise RewardServerError(response.status_code, f"the reply is not a JSON object: {_first_line(response)}")
        return body
    # a 408 (a body or head that arrived too slowly) is the connection's, not the request's: a retry may pass
    error = RewardRequestError if response.is_client_error and response.status_code != 408 else RewardServerError
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        request_id = body.get("request_id")
        raise error(response.status_code, body["error"], str(request_id) if request_id else None)
    raise error(response.status_code, _first_line(response) or response.reason_phrase)


def _first_line(response: httpx.Response) -> str:
    text = response.text.strip()
    return text.splitlines()[0][:200] if text else ""
