"""The texts a record asks to score, read from any record `rm score` takes.

Kept apart from the encoding, batching and writing (rm/evaluation/score_file.py) because it is a question about
data, not about models: which fields of a record hold a text, and where its prompt ends. A pair, a text or a
K-response record (UltraFeedback, Nectar, RewardBench 2, the generic `responses` layout: detected as training
detects them) each becomes a list of `ScoreText`, through training's own parsers where training has one, so a
record is read for scoring exactly as it is read for training.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer, messages_from
from rm.data.formats.group import Group
from rm.data.formats.hh import ASSISTANT, split_pair
from rm.data.formats.pair import ParseContext, user_prompt
from rm.data.formats.parse import detect_format, parse_record
from rm.data.formats.ranked import rendered
from rm.errors import RecordError

GROUP_KEY = "rewards"
"""The output field of a K-response record: a list, one reward per response in the record's order."""


class Listed(NamedTuple):
    """Where a K-response format keeps its responses, and the field that orders them (scoring replaces it)."""

    items: str
    """The list of responses."""
    text: tuple[str, ...]
    """The fields of an item that make its text: two items alike in them are one response."""
    order: str
    """The field the record's own order is written into (the parser's order field)."""
    step: int
    """+1: a rank (lower is better); -1: a score (higher is better)."""
    drop: tuple[str, ...] = ()
    """Other order fields the parser would read instead (a generic response's `score`)."""


LISTED = {
    "ultrafeedback": Listed("completions", ("response",), "overall_score", -1),
    "nectar": Listed("answers", ("answer",), "rank", 1),
    "responses": Listed("responses", ("text", "messages"), "rank", 1, ("score",)),
}
GROUP_FORMATS = (*LISTED, "rewardbench2")


class ScoreText(NamedTuple):
    """One text a record asks to score."""

    key: str
    """The output field its reward goes to (`reward`, `chosen_reward`, `rejected_reward`; `rewards`: appended to
    the record's list of rewards)."""
    prompt: str
    response: str
    turn_starts: tuple[int, ...] | None = None
    """Where the prompt's user turns start (a chat template's text), so a long prompt is cut at its own
    turns; None: at its "\\n\\nHuman:" tags (HH text)."""


def split_last_turn(text: str) -> tuple[str, str]:
    """(prompt, response): the prompt runs to the last "\\n\\nAssistant:" tag; without a tag it is empty."""
    cut = text.rfind(ASSISTANT)
    if cut < 0:
        return "", text
    return text[: cut + len(ASSISTANT)], text[cut + len(ASSISTANT) :]


def texts_of(
    record: Any, origin: str, field: str = "", renderer: Renderer | None = None, report: DataReport | None = None
) -> list[ScoreText]:
    """Each text a record asks to score.

    `field` names the text column explicitly; otherwise, in this order: `transcript` (red-team
    attempts), `text`, `prompt`+`response` (rendered as training's rows format renders it, by `renderer`'s
    record -> text rule: rm/data/formats/text_rule.py), a K-response record (`group_texts`), `chosen`+`rejected` (HH
    pairs, prompt/chosen/rejected, Argilla's "user:"/"assistant:" transcripts or message lists as training reads
    them, rendered by `renderer`; scored as two texts: `chosen_reward` and `rejected_reward`). A record that cannot
    be scored raises RecordError (stop, or skip and count); `report` takes the lossless fixes a group's parser
    makes, as training's does.
    """
    if not isinstance(record, dict):
        raise RecordError("not_an_object", f"expected a JSON object, got {type(record).__name__}")

    def text(name: str) -> str:
        value = record.get(name)
        if not isinstance(value, str):
            got = "missing" if name not in record else f"a {type(value).__name__}"
            raise RecordError("not_a_string", f"field {name!r} must be a string, got {got}", name)
        return value

    fmt = "" if field or any(k in record for k in ("transcript", "text", "response")) else detect_format(record)
    renderer, report = renderer or Renderer(), report or DataReport(repair_always=True)
    if fmt in GROUP_FORMATS:
        return group_texts(record, fmt, origin, renderer, report)
    if fmt in ("conversation", "argilla"):  # message lists (TRL's conversational layout too), Argilla's "user:"
        # transcripts: training's own parser, so the prompt and answers are the turns training renders. Argilla's
        # options that drop or add pairs are training's (data.argilla); scoring reads a record's own chosen/rejected.
        pair = parse_record(fmt, record, origin, ParseContext(report, renderer))[0]
        return [
            ScoreText("chosen_reward", pair.prompt, pair.chosen, pair.turn_starts),
            ScoreText("rejected_reward", pair.prompt, pair.rejected, pair.turn_starts),
        ]
    texts = _texts(record, field, text, renderer)
    for t in texts:  # training refuses a pair whose answer is blank (rm/data/formats/pair.py): so does scoring
        if t.prompt and not t.response.strip():
            where = {"reward": field or "response", "chosen_reward": "chosen", "rejected_reward": "rejected"}[t.key]
            raise RecordError("empty_response", f"field {where!r} has an empty response after the prompt", where)
    return texts


def _texts(record: dict, field: str, text: Callable[[str], str], renderer: Renderer) -> list[ScoreText]:
    """`texts_of`'s choice of fields, in its order."""
    if field:
        return [ScoreText("reward", *split_last_turn(text(field)))]
    for name in ("transcript", "text"):
        if name in record:
            return [ScoreText("reward", *split_last_turn(text(name)))]
    if "response" in record:
        if "prompt" not in record:
            return [ScoreText("reward", "", text("response"))]
        if renderer.version < 2:  # the rule such a model was trained with: prompt + response as written
            return [ScoreText("reward", text("prompt"), text("response"))]
        return [row_text(record, renderer)]
    if isinstance(record.get("chosen"), list) or isinstance(record.get("rejected"), list):
        rendered = renderer.pair(
            messages_from(record.get("chosen"), "chosen"), messages_from(record.get("rejected"), "rejected")
        )
        return [
            ScoreText("chosen_reward", rendered.prompt, rendered.chosen, rendered.turn_starts),
            ScoreText("rejected_reward", rendered.prompt, rendered.rejected, rendered.turn_starts),
        ]
    if "chosen" in record or "rejected" in record:
        chosen, rejected = text("chosen"), text("rejected")
        if "prompt" in record:
            prompt = text("prompt")
            return [ScoreText("chosen_reward", prompt, chosen), ScoreText("rejected_reward", prompt, rejected)]
        try:
            prompt, chosen, rejected = split_pair(chosen, rejected)
        except ValueError:  # identical or unsplittable: score the two conversations whole
            return [
                ScoreText("chosen_reward", *split_last_turn(chosen)),
                ScoreText("rejected_reward", *split_last_turn(rejected)),
            ]
        return [ScoreText("chosen_reward", prompt, chosen), ScoreText("rejected_reward", prompt, rejected)]
    raise RecordError(
        "no_text",
        "no text to score: expected a 'transcript', 'text', 'prompt'+'response' or 'chosen'+'rejected' field "
        f"(or name one with --field); fields are {sorted(record)}",
    )


def row_text(record: dict, renderer: Renderer) -> ScoreText:
    """A `prompt` + `response` record as training's rows format renders it (rm/data/formats/rows.py): the prompt
    (a string, the HH turns it holds, or messages) then the response as the assistant's message."""
    raw = record["prompt"]
    prompt = messages_from(raw, "prompt") if isinstance(raw, list) else user_prompt(record, "prompt")
    response = record.get("response")
    if not isinstance(response, str):
        got = f"a {type(response).__name__}"
        raise RecordError("not_a_string", f"field 'response' must be a string, got {got}", "response")
    text = rendered(prompt, [response], ["response"], renderer)
    return ScoreText("reward", text.prompt, text.responses[0], text.turn_starts)


def group_texts(record: dict, fmt: str, origin: str, renderer: Renderer, report: DataReport) -> list[ScoreText]:
    """Each response of a K-response record in format `fmt`, in the record's order, as training renders it.

    Scoring needs no order, so the record's ranks or scores give way to its own order before training's parser
    reads it: every response is scored, one UltraFeedback leaves unrated, rollouts with no score at all, a group
    whose responses all tie. A response repeated word for word (two rollouts alike) is read once, and both get
    its reward. Anything else training refuses (a missing or empty response, a prompt that is not text) is
    refused with training's message.
    """
    orderless, first = _orderless(record, fmt)
    items = parse_record(fmt, orderless, origin, ParseContext(report, renderer))
    group = next(g for g in items if isinstance(g, Group))
    return [ScoreText(GROUP_KEY, group.prompt, group.responses[u], group.turn_starts) for u in first]


def _orderless(record: dict, fmt: str) -> tuple[dict, list[int]]:
    """The record with its distinct responses in their own order, and for each response of the record the
    position of its text among them. What is not a list of responses is left for the parser to name."""

    def distinct(values: list[Any], key: Callable[[Any], Any]) -> tuple[list[int], list[int]]:
        keep: dict[str, int] = {}  # a response's text, as JSON -> its place among the distinct ones
        kept, first = [], []
        for k, value in enumerate(values):
            text = json.dumps(key(value), sort_keys=True, default=str)
            if text not in keep:
                keep[text] = len(kept)
                kept.append(k)
            first.append(keep[text])
        return kept, first

    if fmt == "rewardbench2":
        chosen, rejected = record.get("chosen"), record.get("rejected")
        if not isinstance(chosen, list) or not isinstance(rejected, list):
            return record, []
        kept, first = distinct(chosen + rejected, lambda v: v)
        keep = set(kept)
        out = {
            **record,
            "chosen": [v for k, v in enumerate(chosen) if k in keep],
            "rejected": [v for k, v in enumerate(rejected, len(chosen)) if k in keep],
        }
        return out, first
    listed = LISTED[fmt]
    values = record.get(listed.items)
    if not isinstance(values, list):
        return record, []

    def text(value: Any) -> Any:
        return [value.get(name) for name in listed.text] if isinstance(value, dict) else value

    kept, first = distinct(values, text)
    items = []
    for place, k in enumerate(kept):
        value = values[k]
        if isinstance(value, dict):
            value = {name: v for name, v in value.items() if name not in listed.drop}
            value[listed.order] = listed.step * place
        items.append(value)
    return {**record, listed.items: items}, first


ATTRIBUTE_KEYS = {
    "reward": "attributes",
    "chosen_reward": "chosen_attributes",
    "rejected_reward": "rejected_attributes",
    GROUP_KEY: "attributes",
}
"""Where `rm score` writes a text's attribute outputs, by the field its reward goes to: for texts and pairs
the fields training reads scores from (rm/data/formats/attributes.py)."""


def output_fields(keys: list[str], values: list[list[float | None]], attributes: list[str]) -> dict[str, Any]:
    """A record's new fields from its texts' output fields (`keys`) and outputs (`values`, each [reward, *one per
    name of `attributes`]): `reward` (`chosen_reward`…) as always, and with attribute outputs `attributes:
    {name: value}` beside it (`chosen_attributes`…; a K-response record's `attributes`, a list in its order)."""
    found: dict[str, Any] = {}
    for key, row in zip(keys, values, strict=True):
        named = dict(zip(attributes, row[1:], strict=True))
        if key == GROUP_KEY:
            found.setdefault(key, []).append(row[0])
            if attributes:
                found.setdefault(ATTRIBUTE_KEYS[key], []).append(named)
        else:
            found[key] = row[0]
            if attributes:
                found[ATTRIBUTE_KEYS[key]] = named
    return found
