"""A request body as JSON the rest of the server can trust: UTF-8, an object, nested no deeper than the API needs,
and every string real text. A body that is not is the client's mistake (400), never a server fault.

Two things Python's json module accepts that the server cannot use: an escaped lone surrogate ("\\ud800", valid
JSON but no Unicode character: the tokenizer and the UTF-8 reply both fail on it), and nesting so deep that
parsing or walking it exhausts the interpreter's recursion limit (~1,000 frames; a 200,000-deep list is 400 KB,
well within --max-body-bytes).
"""

from __future__ import annotations

import json
from typing import Any

from rm.errors import DataError

MAX_DEPTH = 32
"""Nesting levels a body may have; the API's deepest body has 5 ({"groups": [{"prompt": [{"content": ...}]}]})."""


class RequestError(DataError):
    """A request refused with an HTTP status and a one-line message."""

    def __init__(self, status: int, message: str):
        message = " ".join(message.split())  # one line, whatever a chat template's error text holds
        super().__init__(message)
        self.status = status
        self.message = message


def decode(body: bytes) -> dict:
    """The body's JSON object, or a 400 naming what is wrong with it (and where, for a string that is not text)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError(400, "the body is not UTF-8 text") from None
    try:
        payload = json.loads(text)
    except RecursionError:
        raise too_deep() from None
    except ValueError as e:
        raise RequestError(400, f"malformed JSON: {e}") from None
    if not isinstance(payload, dict):
        raise RequestError(400, f"the body must be a JSON object, got a JSON {kind(payload)}")
    check_text(payload)
    return payload


def too_deep() -> RequestError:
    return RequestError(400, f"the JSON is nested deeper than {MAX_DEPTH} levels (this API's bodies need 5)")


def check_text(payload: dict) -> None:
    """Refuse a body nested deeper than MAX_DEPTH or holding a string (or a field name) that is not text: walked
    with a stack of its own, so no depth can exhaust Python's recursion limit."""
    stack: list[tuple[Any, str, int]] = [(payload, "the body", 1)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise too_deep()
        if isinstance(value, str):
            if not is_text(value):
                raise RequestError(400, f"{where} holds a lone surrogate ({first_surrogate(value)}), not text")
        elif isinstance(value, dict):
            for key, item in value.items():
                if not is_text(key):
                    raise RequestError(400, f"a field name in {where} holds a lone surrogate, not text")
                stack.append((item, key if where == "the body" else f"{where}.{key}", depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))


def is_text(value: str) -> bool:
    """Whether `value` is Unicode text (encodes as UTF-8): false only for a lone surrogate, which JSON's \\u
    escapes can spell but no text holds."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def first_surrogate(value: str) -> str:
    return next(f"\\u{ord(c):04x}" for c in value if 0xD800 <= ord(c) <= 0xDFFF)


def kind(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
