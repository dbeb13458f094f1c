"""Argilla exports of HH-RLHF, such as hironow/test-hh-rlhf-12k-ja (Japanese), in their `datasets` form.

A record, as the dataset card shows it:

    chosen, rejected            "user: …\\nassistant: …\\n": one "role: content\\n" per turn; content may
                                hold newlines of its own
    metadata                    a JSON *string*, '{"source": "harmless-base"}': the HH subset
    chosen_rating,              the annotators' responses, [{"user_id", "value": 1-5, "status"}],
      rejected_rating           often empty
    modify_chosen,              edits of the last assistant message, [{"user_id", "value": str, "status"}]
      modify_rejected
    *-suggestion*, external_id  not used

Turns start at "user: " or "assistant: " at the start of the text or of a line. Nothing here splits
on spaces (Japanese has none between words); the messages are rendered like any conversation
(`rm/data/formats/chat.py`), so the prompt/response split and the collator's turn-boundary cut work unchanged.

Three opt-in options (`data.argilla.*`), each counted in the report: a margin from the ratings,
dropping pairs the annotators rated the other way, and extra pairs from the edits.

The ratings as an attribute: a response's `rating` score (RATING, for `model.head.attributes: [rating]`) is the
mean of its submitted annotators' ratings (1-5; none submitted: missing), and the data report's
`argilla.annotators_per_response` counts the responses by how many annotators rated them. Other attributes are
read from `chosen_attributes`/`rejected_attributes`, as for any pair.
"""

from __future__ import annotations

import json
import re
from statistics import fmean
from typing import Any

from rm.config import ArgillaConfig
from rm.data.formats.attributes import Scores, checked, pair_scores
from rm.data.formats.chat import Message
from rm.data.formats.group import score_of
from rm.data.formats.hh import HH_SUBSETS
from rm.data.formats.pair import Pair, ParseContext, lf_only, text_field
from rm.errors import RecordError

TURN = re.compile(r"(?:\A|\n)(user|assistant): ?")
RATING = "rating"
"""The attribute name that reads a response's annotator ratings (`model.head.attributes: [rating]`)."""
EDIT = " (edit: "
"""Marks the origin of a pair made from an edit, e.g. "ja.jsonl:3 (edit: modify_chosen[0])"."""


def parse_turns(text: str, field: str) -> list[Message]:
    parts = TURN.split(text)
    if parts[0] != "" or len(parts) < 3:
        raise RecordError("bad_turns", f"field {field!r} does not start with 'user: ' or 'assistant: '", field)
    messages = [Message(role, content) for role, content in zip(parts[1::2], parts[2::2], strict=True)]
    # Each turn is written "role: content\n": the last newline belongs to the format, not the content.
    last = messages[-1]
    messages[-1] = Message(last.role, last.content.removesuffix("\n"))
    return messages


def subset_of(record: dict) -> str:
    meta = record.get("metadata")
    if meta is None:
        raise RecordError("missing_field", "field 'metadata' is missing (its 'source' names the subset)", "metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError as e:
            raise RecordError("bad_metadata", f"field 'metadata' is not valid JSON ({e.msg})", "metadata") from None
    if not isinstance(meta, dict):
        raise RecordError("bad_metadata", "field 'metadata' must be a JSON object", "metadata")
    source = meta.get("source")
    if source not in HH_SUBSETS:
        known = ", ".join(HH_SUBSETS)
        message = f"field 'metadata.source' is {source!r}, not one of the HH subsets ({known})"
        raise RecordError("unknown_source" if source is not None else "missing_field", message, "metadata.source")
    return source


def responses(value: Any, field: str, ctx: ParseContext) -> list[Any]:
    """Submitted response values: from [{"value", "status"}…], the {"value": […]} columnar form, or bare values."""
    if value is None:
        return []
    if isinstance(value, dict):  # a `Sequence` of dicts comes back from `datasets` as a dict of lists
        try:
            value = [dict(zip(value, row, strict=True)) for row in zip(*value.values(), strict=True)]
        except (TypeError, ValueError):
            raise RecordError(
                "bad_response", f"field {field!r}: its columns are not lists of one length", field
            ) from None
    if not isinstance(value, list):
        raise RecordError("bad_response", f"field {field!r} must be a list of responses", field)
    out = []
    for item in value:
        if isinstance(item, dict):
            if item.get("status", "submitted") != "submitted":  # drafts and discarded answers are not judgements
                ctx.report.count("argilla", "responses_not_submitted")
                continue
            item = item.get("value")
        out.append(item)
    return out


def ratings(record: dict, field: str, ctx: ParseContext) -> list[int]:
    values = responses(record.get(field), field, ctx)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 5:
            raise RecordError("bad_rating", f"field {field!r} has rating {v!r}; ratings are integers 1-5", field)
    return values


def parse_argilla(record: dict, origin: str, ctx: ParseContext) -> list[Pair]:
    opts = ctx.argilla or ArgillaConfig()
    report = ctx.report
    chosen = parse_turns(lf_only(text_field(record, "chosen"), "chosen", origin, report), "chosen")
    rejected = parse_turns(lf_only(text_field(record, "rejected"), "rejected", origin, report), "rejected")
    subset = subset_of(record)
    c_rating, r_rating = ratings(record, "chosen_rating", ctx), ratings(record, "rejected_rating", ctx)
    edits = {name: responses(record.get(name), name, ctx) for name in ("modify_chosen", "modify_rejected")}
    for name, values in edits.items():
        if any(not isinstance(v, str) for v in values):
            raise RecordError("not_a_string", f"field {name!r} has an edit that is not a string", name)
    text = ctx.renderer.pair(chosen, rejected)
    report.count("argilla", "records")

    margin, keep = None, True
    if c_rating and r_rating:
        report.count("argilla", "rated_on_both_sides")
        if opts.drop_rating_disagreements and fmean(r_rating) >= fmean(c_rating):
            report.count("argilla", "dropped_rating_disagreements")
            keep = False
        elif opts.margin_from_ratings:
            margin = fmean(c_rating) - fmean(r_rating)
            report.count("argilla", "margins_from_ratings")
    pairs = [Pair(text.prompt, text.chosen, text.rejected, subset, margin=margin, origin=origin,
                  turn_starts=text.turn_starts, parts_early=text.parts_early)]  # fmt: skip
    if c_rating and r_rating:  # its strength: the rating difference (rm/data/formats/strength.py)
        pairs[0].strength = score_of(fmean(c_rating) - fmean(r_rating), "chosen_rating - rejected_rating")
    scores = rating_scores(record, c_rating, r_rating, ctx)
    pairs[0].attributes = scores if any(scores) else None
    pairs = pairs if keep else []
    if opts.pairs_from_edits:
        pairs += _edit_pairs(chosen, rejected, edits, subset, origin, ctx)
        for pair in pairs[1 if keep else 0 :]:  # an edit is rated by no one; the rejected side keeps its scores
            pair.attributes = ({}, scores[1]) if scores[1] else None
    return pairs


def rating_scores(record: dict, c_rating: list[int], r_rating: list[int], ctx: ParseContext) -> tuple[Scores, Scores]:
    """(chosen's, rejected's) attribute scores: `rating` the mean of the submitted annotators' ratings (none: missing),
    the other names from `chosen_attributes`/`rejected_attributes`; each response's number of annotators counted."""
    out, sides = [], zip(pair_scores(record), (c_rating, r_rating), ("chosen_rating", "rejected_rating"), strict=True)
    for side, given, field in sides:
        ctx.report.tally("argilla", "annotators_per_response", len(given))
        out.append(side | ({RATING: checked(fmean(given), field)} if given else {}))
    return out[0], out[1]


def _edit_pairs(
    chosen: list[Message], rejected: list[Message], edits: dict, subset: str, origin: str, ctx: ParseContext
) -> list[Pair]:
    """An edited last answer (of either conversation) preferred over the original rejected conversation."""
    pairs = []
    for name, values in edits.items():
        base = chosen if name == "modify_chosen" else rejected
        for i, value in enumerate(values):
            where = f"{origin}{EDIT}{name}[{i}])"
            if base[-1].role != "assistant":
                ctx.report.reject(where, RecordError("bad_turns", f"{name}: no final assistant message to edit", name))
                continue
            edited = base[:-1] + [Message("assistant", value)]
            if not value.strip() or edited in (chosen, rejected):
                ctx.report.count("argilla", "edits_empty_or_unchanged")
                continue
            try:
                text = ctx.renderer.pair(edited, rejected)
            except RecordError as e:
                ctx.report.reject(where, RecordError(e.reason, e.message, name))
                continue
            pairs.append(
                Pair(
                    text.prompt,
                    text.chosen,
                    text.rejected,
                    subset,
                    origin=where,
                    turn_starts=text.turn_starts,
                    parts_early=text.parts_early,
                )  # fmt: skip
            )
            ctx.report.count("argilla", "edit_pairs_added")
    return pairs
