"""A /classify or /pooling body, read as vLLM 0.34.0 reads it and checked before it may join a batch.

The bodies are vLLM's `ClassificationRequest` and `PoolingRequest` (vllm/entrypoints/pooling/classify/protocol.py,
pooling/protocol.py, their fields in pooling/base/protocol.py): either `input`, one text or a list of texts, each
an item, or `messages`, one conversation, one item. A text is read as /score reads one of its `texts` (a
`{"text": ...}` record, split at its last "Assistant:" tag) after a leading BOS text is removed where the tokenizer
puts a BOS in front itself (a chat template rendered to text starts with one, and vLLM's clients then send
`add_special_tokens: false`): the BOS is not counted twice. A conversation is read as /score reads one of its
`messages` (it must end with the assistant's answer; text parts of a message's content are joined with "\\n", as
vLLM joins them).

vLLM accepts fields it does not know (its models allow extra fields, with a log line), and so does this: they are
named in the server log. Fields vLLM knows are type-checked. Those that would change what vLLM computes and that
rm's fixed rule cannot honour are refused (400, naming the field) unless they hold their default: a
`truncate_prompt_tokens` other than null or -1 (rm fits every text into the model's max_length by its own rule, as
`rm score` does; past it the server's --on-too-long applies), `truncation_side: "right"`, `padding: "max_length"`,
a `chat_template`, `chat_template_kwargs`, `add_generation_prompt` or `continue_final_message` (rm renders a
conversation with the model's own template), token ids as `input` (rm scores text), and on /pooling a `task` other
than classify, `dimensions`, or an `encoding_format` other than float. `add_special_tokens` is accepted and
rm's rule adds the tokenizer's prefix either way; `model` is not checked (vLLM 0.34 does not check it either).
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from rm.serve.bodies import STEP_ITEMS, Prepared, conversation, counted, guarded, text_item
from rm.serve.json_body import RequestError, decode, kind
from rm.serve.scorer import Scorer

log = logging.getLogger("rm.serve")

VLLM_RELEASE = "0.34.0"
"""The vLLM release whose bodies these are."""

NULLABLE = {"model": str, "user": str, "truncate_prompt_tokens": int, "padding": str, "truncation_side": str,
            "cache_salt": str, "use_activation": bool, "mm_processor_kwargs": dict, "chat_template": str,
            "chat_template_kwargs": dict, "media_io_kwargs": dict, "task": str, "dimensions": int}  # fmt: skip
"""vLLM's fields that may be null, and the JSON type of their value otherwise."""
REQUIRED = {"request_id": str, "priority": int, "add_special_tokens": bool, "add_generation_prompt": bool,
            "continue_final_message": bool, "encoding_format": str, "embed_dtype": str, "endianness": str}  # fmt: skip
"""vLLM's fields that, when given, must hold a value of this type."""
CHOICES = {"padding": ("max_length", "do_not_pad"), "truncation_side": ("left", "right"),
           "encoding_format": ("float", "base64", "bytes", "bytes_only"), "endianness": ("native", "big", "little"),
           "embed_dtype": ("float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"),
           "task": ("embed", "classify", "token_embed", "token_classify", "plugin",
                    "embed&token_classify")}  # fmt: skip
"""vLLM's Literal fields and the values it accepts."""
HONOURED = {"truncate_prompt_tokens": (None, -1), "padding": (None, "do_not_pad"), "truncation_side": (None, "left"),
            "chat_template": (None,), "chat_template_kwargs": (None, {}), "add_generation_prompt": (False,),
            "continue_final_message": (False,), "dimensions": (None,)}  # fmt: skip
"""Fields rm answers only at these values (any other would make vLLM compute something rm's rule does not)."""
POOLING_ONLY = {"task": (None, "classify"), "encoding_format": ("float",)}


class VllmError(RequestError):
    """A refused request with vLLM's `param`: the field at fault."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(status, message)
        self.param = param


@dataclass
class VllmAsked:
    """A checked /classify or /pooling request: its items (one text each) as /score prepares them."""

    route: str
    prepared: Prepared
    tokens: list[int]
    """Per item, the tokens scored (the prompt's and the response's, with the tokenizer's prefix): vLLM's usage."""
    request_id: str | None
    use_activation: bool | None


def preparing_vllm(
    route: str, body: bytes, scorer: Scorer, max_texts: int, on_too_long: str
) -> Generator[None, None, VllmAsked]:
    """The body of a POST to /classify or /pooling as /score's items, or the RequestError that refuses it: a
    generator run by the preparation thread like rm/serve/bodies.py `preparing`, STEP_ITEMS items a step."""
    payload = decode(body)
    checked(payload, route)
    makers, names = items_of(payload, scorer, max_texts)
    items = []
    for k, (make, name) in enumerate(zip(makers, names, strict=True)):
        if k % STEP_ITEMS == 0:
            yield
        texts = make()
        groups = guarded(lambda texts=texts: scorer.encode(texts), name)
        if on_too_long == "error" and any(g.truncated for g in groups):
            message = f"{name} does not fit max_length={scorer.max_length} tokens (this server refuses texts over "
            raise VllmError(422, message + "max_length: --on-too-long error)", name.split("[")[0])
        items.append(groups)
    yield
    tokens = [sum(len(g.prompt_ids) + len(r) for g in item for r in g.response_ids) for item in items]
    return VllmAsked(route, Prepared(items, False), tokens, payload.get("request_id"), payload.get("use_activation"))


def checked(payload: dict, route: str) -> None:
    """Refuse a known field of the wrong type or value, or one rm cannot honour; log the unknown ones."""
    if "normalize" in payload:  # vLLM 0.34 refuses it by name (pooling/base/protocol.py)
        message = "normalize is no longer a field of vLLM's pooling API (it refuses it too): send use_activation"
        raise VllmError(400, message, "normalize")
    for name, value in payload.items():
        want = NULLABLE.get(name) or REQUIRED.get(name)
        if want is None:
            continue
        if value is None and name in NULLABLE:
            continue
        if type(value) is not want and not (want is int and type(value) is float and value.is_integer()):
            raise VllmError(400, f"{name} must be a JSON {kind(want())}, got a JSON {kind(value)}", name)
        if name in CHOICES and value not in CHOICES[name]:
            raise VllmError(400, f"{name} must be one of {list(CHOICES[name])}, got {value!r}", name)
    rules = HONOURED | (POOLING_ONLY if route == "pooling" else {})
    for name, allowed in rules.items():
        if name in payload and payload[name] not in allowed:
            raise VllmError(400, f"{name}={payload[name]!r} is not served here: {REASONS[name]}", name)
    known = set(NULLABLE) | set(REQUIRED) | {"input", "messages"}
    if unknown := sorted(set(payload) - known):
        log.info("/%s: fields %s are not vLLM's and are ignored, as vLLM ignores them", route, unknown)


REASONS = {
    "truncate_prompt_tokens": "rm serve fits every text into the model's max_length by rm's rule (its --on-too-long "
    "decides what happens past it); send null or -1",
    "padding": "rm serve does not pad a text to max_length; send null or do_not_pad",
    "truncation_side": "rm keeps a text's end (where the reward is read); send null or left",
    "chat_template": "rm renders conversations with the model's own template, as rm score does; leave it out",
    "chat_template_kwargs": "rm renders conversations with the model's own template, as rm score does; leave it out",
    "add_generation_prompt": "the conversation is scored as it ends, with the assistant's answer; leave it false",
    "continue_final_message": "the conversation is scored as it ends, with the assistant's answer; leave it false",
    "dimensions": "a reward model has no embedding dimensions to choose; leave it out",
    "task": "rm serve answers the classify task of a sequence-classification reward model; send classify or null",
    "encoding_format": "rm serve answers the float encoding (JSON numbers); send float",
}


def items_of(payload: dict, scorer: Scorer, max_texts: int) -> tuple[list, list[str]]:
    """Each item's texts, made when called, and its name: the texts of `input`, or the one `messages`."""
    if ("input" in payload) == ("messages" in payload):
        message = "give either 'input' (a text or a list of texts) or 'messages' (one conversation)"
        raise VllmError(400, message, "input")
    if "messages" in payload:
        value = payload["messages"]
        return [lambda: conversation(joined(value), "messages", scorer)], ["messages"]
    value = payload["input"]
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        bad = texts if not isinstance(texts, list) else next(t for t in texts if not isinstance(t, str))
        if isinstance(bad, (int, list)) and not isinstance(bad, bool):
            message = "token ids are not served here: rm scores text by its own rule; send the text"
            raise VllmError(400, message, "input")
        raise VllmError(400, f"'input' must be a string or an array of strings, got a JSON {kind(bad)}", "input")
    if not texts:
        raise VllmError(400, "'input' is an empty array: send at least one text", "input")
    counted(len(texts), max_texts, "texts")
    names = ["input"] if isinstance(value, str) else [f"input[{i}]" for i in range(len(texts))]
    return [lambda t=t, n=n: text_item(without_bos(t, scorer), n) for t, n in zip(texts, names, strict=True)], names


def without_bos(text: str, scorer: Scorer) -> str:
    """`text` without a leading BOS text where the tokenizer puts a BOS in front itself (rm adds it, once)."""
    bos = scorer.tokenizer.bos_token if scorer.prefix else None
    return text[len(bos) :] if bos and text.startswith(bos) else text


def joined(messages: Any) -> Any:
    """The conversation with a content given as text parts ([{"type": "text", "text": ...}, ...]) made one string,
    the parts joined with "\\n" as vLLM joins them; anything else is left for /score's checks to refuse."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages:
        parts = m.get("content") if isinstance(m, dict) else None
        if isinstance(parts, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
            if all(isinstance(p.get("text"), str) for p in parts):
                m = m | {"content": "\n".join(p["text"] for p in parts)}
        out.append(m)
    return out
