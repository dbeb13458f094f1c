"""One row per response (HelpSteer2's layout): `prompt`, `response` and score columns, grouped later by prompt.

HelpSteer2 rates each response on its own line (`helpfulness`, `correctness`, `coherence`, `complexity`,
`verbosity`, 0-4), with the two responses to one prompt on neighbouring lines. A row alone says nothing
about order, so `parse_rows` returns a `Row` and `rm/data/grouping.py` gathers the rows of one prompt into a
`Group`; a record is one row, and a bad group is reported by the lines of all its rows.

The prompt (text, a user message, or a list of messages) and the response (an assistant message) are
rendered as every other format's messages are (`rm/data/formats/ranked.py:rendered`), one row at a time:
rendering is per conversation, so rows of one prompt render the same prompt text and group by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from rm.data.formats.attributes import row_scores
from rm.data.formats.chat import messages_from
from rm.data.formats.group import score_of
from rm.data.formats.pair import NO_LABELS, ParseContext, subset_of, text_field, user_prompt
from rm.data.formats.ranked import rendered
from rm.errors import RecordError

HELPSTEER2_SCORES = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")
"""HelpSteer2's rating columns, 0-4 each: a record with one of them is a row."""
DEFAULT_SCORE = "helpfulness"
"""HelpSteer2's headline rating, the one its reward models are trained to predict first."""


@dataclass
class Row:
    """One response to a prompt with its score: a group of one, waiting for the rest of its prompt's rows."""

    prompt: str
    response: str
    score: float
    subset: str
    _: KW_ONLY
    origin: str
    score_field: str
    """The column the score came from, for messages about the group."""
    turn_starts: tuple[int, ...] | None = None
    attributes: dict[str, float] | None = None
    """Its attribute scores by name (rm/data/formats/attributes.py); None or {}: none."""
    labels: Mapping[str, Any] = NO_LABELS
    """Registered labels' values by name (rm/data/labels.py): its group's, or its own response's."""


def parse_rows(record: dict, origin: str, ctx: ParseContext) -> list[Row]:
    """The row, or nothing when its score is missing ("N/A", null): an unscored response is left out, counted."""
    field = ctx.score_field or DEFAULT_SCORE
    raw = record.get("prompt")
    prompt = messages_from(raw, "prompt") if isinstance(raw, list) else user_prompt(record, "prompt")
    response = text_field(record, "response")
    if field not in record:
        raise RecordError("missing_field", f"field {field!r} (the score, data.score_field) is missing", field)
    score = score_of(record[field], field)
    if not response.strip():
        raise RecordError("empty_response", "field 'response' is empty", "response")
    text = rendered(prompt, [response], ["response"], ctx.renderer)
    if score is None:
        ctx.report.count("rows", "unscored_left_out")
        return []
    subset = subset_of(record, ctx.subset)
    attributes = row_scores(record, HELPSTEER2_SCORES)
    return [Row(text.prompt, text.responses[0], score, subset, origin=origin, score_field=field,
                turn_starts=text.turn_starts, attributes=attributes)]  # fmt: skip
