"""Record formats: one parser per format, each turning a raw record into `Pair`s, a `Group`, `Row`s or a
`RecordError`.

| format | a record | detected by |
| --- | --- | --- |
| `hh` | `{"chosen": "\\n\\nHuman: …\\n\\nAssistant: …", "rejected": …}`: two whole conversations | `chosen` a string |
| `prompt` | `{"prompt": str, "chosen": str, "rejected": str}` | `prompt` |
| `conversation` | `chosen`/`rejected` (and optionally `prompt`) as lists of `{"role", "content"}` messages | a list |
| `argilla` | an Argilla export such as hironow/test-hh-rlhf-12k-ja (`rm/data/formats/argilla.py`) | its fields |
| `ultrafeedback` | `instruction` (or `prompt`), `completions: [{response, overall_score, …}]` | `completions` |
| `nectar` | `prompt` (HH turns), `answers: [{answer, rank, model}]` | `answers` |
| `rewardbench2` | `prompt`, `chosen: [str, …]`, `rejected: [str, …]` | two lists of strings |
| `responses` | `prompt`, `responses: [{text or messages, score or rank}]` | `responses` |
| `rows` | `prompt`, `response`, a score column (HelpSteer2; `rm/data/formats/rows.py`) | `response` |
| `helpsteer2-preference` | `prompt`, `response_1`, `response_2`, `preference_strength` -3..3 (strength.py) | those |
| `red-team` | red-team-attempts transcripts: scored (`rm/data/transcripts.py`), refused for training | `transcript` |

The K-response formats (`rm/data/formats/ranked.py`) are detected only in records without `chosen`
(RewardBench 2's lists of strings aside), so every pairwise record is detected as it always was. Pairwise
records may say `"tie": true` or carry `chosen_score`/`rejected_score` (equal: a tie). Any format may also
carry `subset` (a string) and `margin` (a number). `data.columns` renames a source's columns to these names
first, so anything else can be read as one of the above.

A record that misses a field is detected as the format whose fields it has (`PARTIAL_FIELDS`; a HelpSteer2
row without `response`, a RewardBench 2 record whose `chosen` is a string), so its parser names the field of
that format that is wrong, not a field of another format that the record never meant to have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rm.data.formats.argilla import parse_argilla
from rm.data.formats.attributes import pair_scores
from rm.data.formats.chat import Message, messages_from
from rm.data.formats.group import Group
from rm.data.formats.hh import ASSISTANT, split_pair
from rm.data.formats.pair import (
    Pair,
    ParseContext,
    check_responses,
    lf_only,
    margin_of,
    subset_of,
    text_field,
    tie_of,
    user_prompt,
)
from rm.data.formats.ranked import parse_nectar, parse_responses, parse_rewardbench2, parse_ultrafeedback
from rm.data.formats.rows import HELPSTEER2_SCORES, Row, parse_rows
from rm.data.formats.strength import HELPSTEER2_PREFERENCE, parse_helpsteer2_preference, with_strength
from rm.data.labels import parsed_labels
from rm.errors import RecordError

FORMATS = ("hh", "prompt", "conversation", "argilla", "red-team")
FORMATS += ("ultrafeedback", "nectar", "rewardbench2", "responses", "rows", "helpsteer2-preference")
K_FORMATS = {"completions": "ultrafeedback", "answers": "nectar", "responses": "responses", "response": "rows"}
"""A K-response format by the field that holds its responses, in a record without `chosen`."""
PARTIAL_FIELDS = {
    "helpsteer2-preference": HELPSTEER2_PREFERENCE,
    "rows": HELPSTEER2_SCORES,
    "ultrafeedback": ("instruction",),
}
"""In a record without `chosen`, `rejected` or any format's response field, the fields that still show its format."""
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
    if "chosen" not in record and all(k in record for k in HELPSTEER2_PREFERENCE):
        return "helpsteer2-preference"
    if "chosen" not in record:
        found = next((fmt for name, fmt in K_FORMATS.items() if name in record), None)
        if found:
            return found
    if "chosen" not in record and "rejected" not in record:
        found = max(PARTIAL_FIELDS, key=lambda fmt: sum(k in record for k in PARTIAL_FIELDS[fmt]))
        if any(k in record for k in PARTIAL_FIELDS[found]):
            return found
    lists = [v for v in (chosen, record.get("rejected")) if isinstance(v, list)]
    if lists and all(_strings(v) for v in lists) and any(lists):  # one list of strings shows RewardBench 2
        return "rewardbench2"
    if isinstance(chosen, list) or isinstance(prompt, list) or is_message_list(record.get("rejected")):
        return "conversation"
    if "prompt" in record:
        return "prompt"
    if isinstance(chosen, str):
        return "hh"
    return None


def unmapped(record: Any, error: RecordError, fmt: str = "") -> RecordError:
    """A record that failed in the format its fields suggest, but holds a message list under a name rm does
    not read ({"messages": [...], "chosen": str}), or was taken for a format by a field that is not its responses
    ({"instruction": ..., "output": ...} for UltraFeedback): every record of such a source would fail alike, so
    the way out is data.columns, not skipping them. Any other failure is returned as it is."""
    items = record.items() if isinstance(record, dict) else []
    lists = [k for k, v in items if k not in PAIR_FIELDS and is_message_list(v)]
    taken = [name for name, f in K_FORMATS.items() if f == fmt]  # the responses' field that was not there
    if not lists and taken and not any(name in record for name in taken) and error.reason == "missing_field":
        fields = ", ".join(sorted(map(str, record)))
        return RecordError(
            "unknown_format", f"{error.message} (read as {fmt} from its fields: {fields}); {COLUMNS_HINT}"
        )
    if not lists:
        return error
    return RecordError(
        "unknown_format",
        f"{error.message}; the messages in field {lists[0]!r} are not read under that name: "
        f"map them with data.columns={{prompt: {lists[0]}}} (--columns prompt={lists[0]})",
        lists[0],
    )


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


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
    subset = subset_of(record, ctx.subset)
    return [Pair(prompt, c, r, subset, margin=margin_of(record), origin=origin, parts_early=early, tie=tie_of(record))]


def parse_prompt(record: dict, origin: str, ctx: ParseContext) -> list[Pair]:
    prompt, chosen, rejected = (text_field(record, k) for k in ("prompt", "chosen", "rejected"))
    check_responses(chosen, rejected)
    subset, tie = subset_of(record, ctx.subset), tie_of(record)
    return [Pair(prompt, chosen, rejected, subset, margin=margin_of(record), origin=origin, tie=tie)]


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
        head = [Message("user", user_prompt(record, "prompt"))]
    else:  # no prompt, or a string that merely repeats the conversations' first user message
        head = []
    text = ctx.renderer.pair(head + chosen, head + rejected)
    subset = subset_of(record, ctx.subset)
    margin, tie = margin_of(record), tie_of(record)
    return [
        Pair(
            text.prompt,
            text.chosen,
            text.rejected,
            subset,
            margin=margin,
            origin=origin,
            turn_starts=text.turn_starts,
            parts_early=text.parts_early,
            tie=tie,
        )  # fmt: skip
    ]


def parse_record(fmt: str, record: Any, origin: str, ctx: ParseContext) -> list[Pair | Group | Row]:
    """What one record gives: pairs (an Argilla record may give several), one group, a row (none when its
    score is missing), or a RecordError. Rows become groups in `rm.data.grouping.gather_groups`."""
    if not isinstance(record, dict):
        raise RecordError("not_an_object", f"expected a JSON object, got {type(record).__name__}")
    out = PARSERS[fmt](record, origin, ctx)
    if fmt in ("hh", "prompt", "conversation") and ("chosen_attributes" in record or "rejected_attributes" in record):
        scores = pair_scores(record)  # one pair, whose record holds its scores (attributes.py)
        out[0].attributes = scores if any(scores) else None
    if fmt in ("hh", "prompt", "conversation"):  # the pair's strength, whatever the loss (strength.py)
        with_strength(out[0], record)
    out = out if isinstance(out, list) else [out]
    parsed_labels(record, out)  # every registered label, in every format
    return out


PARSERS: dict[str, Callable[[dict, str, ParseContext], Any]] = {
    "hh": parse_hh,
    "prompt": parse_prompt,
    "conversation": parse_conversation,
    "argilla": parse_argilla,
    "ultrafeedback": parse_ultrafeedback,
    "nectar": parse_nectar,
    "rewardbench2": parse_rewardbench2,
    "responses": parse_responses,
    "rows": parse_rows,
    "helpsteer2-preference": parse_helpsteer2_preference,
}
"""Each format's parser, (record, origin, ctx) -> its pairs, its group or its rows."""
