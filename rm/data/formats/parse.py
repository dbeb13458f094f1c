"""Record formats: one parser per format, each turning a raw record into `Pair`s or a `RecordError`.

| format | a record |
| --- | --- |
| `hh` | `{"chosen": "\\n\\nHuman: …\\n\\nAssistant: …", "rejected": …}`: two whole conversations |
| `prompt` | `{"prompt": str, "chosen": str, "rejected": str}` |
| `conversation` | `chosen`/`rejected` (and optionally `prompt`) as lists of `{"role", "content"}` messages |
| `argilla` | an Argilla export such as hironow/test-hh-rlhf-12k-ja (see `rm/data/formats/argilla.py`) |
| `red-team` | red-team-attempts transcripts: read by `rm/data/transcripts.py` for scoring, refused for training |

Any format may also carry `subset` (a string) and `margin` (a number). `data.columns` renames a
source's columns to these names first, so anything else can be read as one of the above.
"""

from __future__ import annotations

from typing import Any

from rm.data.formats.argilla import parse_argilla
from rm.data.formats.chat import Message, messages_from
from rm.data.formats.hh import ASSISTANT, split_pair
from rm.data.formats.pair import Pair, ParseContext, check_responses, lf_only, margin_of, subset_of, text_field
from rm.errors import RecordError

FORMATS = ("hh", "prompt", "conversation", "argilla", "red-team")
PAIR_FIELDS = ("prompt", "chosen", "rejected", "subset", "margin")
COLUMNS_HINT = (
    "name rm's fields among them with data.columns={prompt: COLUMN, chosen: COLUMN, rejected: COLUMN} "
    "(--columns chosen=COLUMN,... for data inspect and eval), or set data.format"
)
ARGILLA_MARKS = ("chosen_rating", "rejected_rating", "modify_chosen", "modify_rejected")


def detect_format(record: Any) -> str | None:
    """The format a record looks like, from its fields; None when it looks like none of them."""
    if not isinstance(record, dict):
        return None
    chosen, prompt = record.get("chosen"), record.get("prompt")
    if "transcript" in record and "chosen" not in record:
        return "red-team"
    if any(k in record for k in ARGILLA_MARKS) or (
        prompt is None and isinstance(chosen, str) and chosen.startswith("user:")
    ):
        return "argilla"
    if isinstance(chosen, list) or isinstance(prompt, list):
        return "conversation"
    if "prompt" in record:
        return "prompt"
    if isinstance(chosen, str):
        return "hh"
    return None


def is_message_list(value: Any) -> bool:
    """A non-empty list of {"role", "content"} messages: a conversation, whatever its field is called."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def apply_columns(record: Any, columns: dict[str, str]) -> Any:
    """The record with each of rm's field names taken from the source column `data.columns` maps it to."""
    if not columns or not isinstance(record, dict):
        return record
    out = dict(record)
    for name, source in columns.items():
        if source not in record:
            raise RecordError("missing_field", f"field {source!r} (data.columns.{name}) is missing", source)
        out[name] = record[source]
    return out


def parse_hh(record: dict, origin: str, ctx: ParseContext) -> list[Pair]:
    chosen = lf_only(text_field(record, "chosen"), "chosen", origin, ctx.report)
    rejected = lf_only(text_field(record, "rejected"), "rejected", origin, ctx.report)
    try:
        prompt, c, r = split_pair(chosen, rejected)
    except RecordError as e:
        raise RecordError(e.reason, f"fields 'chosen' and 'rejected': {e}") from None
    check_responses(c, r)
    early = ASSISTANT in c or ASSISTANT in r
    return [Pair(prompt, c, r, subset_of(record, ctx.subset), margin_of(record), origin, None, early)]


def parse_prompt(record: dict, origin: str, ctx: ParseContext) -> list[Pair]:
    prompt, chosen, rejected = (text_field(record, k) for k in ("prompt", "chosen", "rejected"))
    check_responses(chosen, rejected)
    return [Pair(prompt, chosen, rejected, subset_of(record, ctx.subset), margin_of(record), origin)]


def _responses(record: dict, name: str, wrap: bool) -> list[Message]:
    if record.get(name) is None:
        raise RecordError("missing_field", f"field {name!r} is missing", name)
    if wrap and isinstance(record[name], str):  # a message-list prompt with plain-string answers
        return [Message("assistant", record[name])]
    return messages_from(record[name], name)


def parse_conversation(record: dict, origin: str, ctx: ParseContext) -> list[Pair]:
    """Whole conversations, or a prompt (a message list, or a string) plus the two answers' messages."""
    prompt = record.get("prompt")
    chosen = _responses(record, "chosen", isinstance(prompt, list))
    rejected = _responses(record, "rejected", isinstance(prompt, list))
    if isinstance(prompt, list):
        head = messages_from(prompt, "prompt")
    elif isinstance(prompt, str) and chosen[0].role == "assistant":
        head = [Message("user", prompt)]
    else:  # no prompt, or a string that merely repeats the conversations' first user message
        head = []
    text = ctx.renderer.pair(head + chosen, head + rejected)
    subset = subset_of(record, ctx.subset)
    margin = margin_of(record)
    return [Pair(text.prompt, text.chosen, text.rejected, subset, margin, origin, text.turn_starts, text.parts_early)]


def parse_record(fmt: str, record: Any, origin: str, ctx: ParseContext) -> list[Pair]:
    """The pairs one record gives (an Argilla record may give several), or a RecordError."""
    if not isinstance(record, dict):
        raise RecordError("not_an_object", f"expected a JSON object, got {type(record).__name__}")
    if fmt == "argilla":
        return parse_argilla(record, origin, ctx)
    return PARSERS[fmt](record, origin, ctx)


PARSERS = {"hh": parse_hh, "prompt": parse_prompt, "conversation": parse_conversation}
