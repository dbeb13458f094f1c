"""Record formats with K responses to one prompt, each in its dataset's published field names:

| format | a record |
| --- | --- |
| `ultrafeedback` | `instruction` (or `prompt`), `completions: [{response, overall_score, fine-grained_score,
  annotations: {aspect: {Rating, …}}}]` |
| `nectar` | `prompt` (HH turns, ending "\\n\\nAssistant:"), `answers: [{answer, rank, model}]`, rank 1 best |
| `rewardbench2` | `prompt`, `chosen: [str, …]`, `rejected: [str, …]`, `subset`: every chosen over every rejected |
| `responses` | `prompt` (text or messages), `responses: [{text or messages, score or rank}]` |

`data.score_field` (`ParseContext.score_field`) names the score that orders an UltraFeedback group
(`overall_score` by default, `fine-grained_score`, or an annotation aspect such as `helpfulness`, whose
`Rating` is read); a missing score ("N/A") leaves that response out rather than refusing the record. A
plain-text prompt is a user message (or the HH turns it holds: rm/data/formats/text_rule.py) and each response an
assistant message, rendered as pairs of message lists are (rm/data/formats/chat.py: the tokenizer's chat template,
or HH text); Nectar's prompts are HH text already, read as the turns they hold and rendered the same way (so a
model with a chat template trains on its own template, as `/score_groups` scores the same prompt), and its answers
follow them as HH answers do (after a space; HH text again without a chat template). Runs saved with
data.text_version 1 keep Nectar's HH text as written.
One row per response (HelpSteer2) is `rm/data/formats/rows.py`.
"""

from __future__ import annotations

from typing import Any

from rm.data.formats.attributes import scores_from, ultrafeedback_scores
from rm.data.formats.chat import Message, RenderedGroup, Renderer, messages_from
from rm.data.formats.group import Group, checked_group, ranks_from_places, ranks_from_scores, score_of
from rm.data.formats.hh import ASSISTANT
from rm.data.formats.pair import ParseContext, string_of, subset_of, text_field, user_prompt
from rm.data.formats.text_rule import answer_message, holds_hh_turns, prompt_messages
from rm.errors import RecordError


def list_field(record: dict, name: str, field: str | None = None) -> list:
    """`record[name]`, which must be a list; a bad record names `field` (its path in the record, default `name`)."""
    field = field or name
    value = record.get(name)
    if value is None:
        raise RecordError("missing_field", f"field {field!r} is missing", field)
    if not isinstance(value, list):
        raise RecordError("not_a_list", f"field {field!r} must be a list, got {type(value).__name__}", field)
    return value


def _object(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise RecordError("not_an_object", f"field {field!r} must be an object, got {type(value).__name__}", field)
    return value


def rendered(
    prompt: str | list[Message], texts: list[str | list[Message]], names: list[str], renderer: Renderer,
    field: str = "prompt",
) -> RenderedGroup:  # fmt: skip
    """Messages as text: a string prompt and string responses by the record -> text rule (text_rule.py: one user
    message, or the HH turns it holds), named `field` in errors."""
    head, after_hh = prompt_messages(prompt, renderer, field)
    rests = [[answer_message(t, after_hh)] if isinstance(t, str) else t for t in texts]
    for name, rest in zip(names, rests, strict=True):
        if rest[0].role != "assistant":
            raise RecordError("bad_message", f"field {name!r} must start with an assistant message", name)
    return renderer.group(head, rests, names)


def _rendered_group(
    prompt: str | list[Message], texts: list[str | list[Message]], rank: tuple[int, ...], names: list[str],
    ctx: ParseContext, record: dict, origin: str, fields: tuple[str, str], scores: tuple[float, ...] | None = None,
    attributes: list[dict[str, float]] | None = None, field: str = "prompt",
) -> Group:  # fmt: skip
    text = rendered(prompt, texts, names, ctx.renderer, field)
    subset = subset_of(record, ctx.subset)
    return checked_group(
        text.prompt, list(text.responses), rank, names, subset, origin, *fields, turn_starts=text.turn_starts,
        scores=scores, attributes=tuple(attributes) if any(attributes or ()) else None,
    )  # fmt: skip


def ultrafeedback_score(completion: dict, field: str, where: str) -> float | None:
    """`completion[field]`, or the `Rating` of annotation aspect `field` (UltraFeedback's per-aspect ratings)."""
    if field in completion:
        return score_of(completion[field], f"{where}.{field}")
    aspect = _object(completion.get("annotations", {}), f"{where}.annotations").get(field)
    if aspect is None:
        message = f"field '{where}.{field}' is missing (no such score or annotation)"
        raise RecordError("missing_field", message, f"{where}.{field}")
    return score_of(_object(aspect, f"{where}.annotations.{field}").get("Rating"), f"{where}.annotations.{field}")


def parse_ultrafeedback(record: dict, origin: str, ctx: ParseContext) -> Group:
    score_field = ctx.score_field or "overall_score"
    name = "instruction" if "instruction" in record else "prompt"
    prompt = user_prompt(record, name)
    texts, scores, names, attributes = [], [], [], []
    for k, item in enumerate(list_field(record, "completions")):
        where = f"completions[{k}]"
        completion = _object(item, where)
        score = ultrafeedback_score(completion, score_field, where)
        if score is not None:  # an unrated completion is left out, not a bad record
            texts.append(string_of(completion.get("response"), f"{where}.response"))
            scores.append(score)
            names.append(f"{where}.response")
            attributes.append(ultrafeedback_scores(completion, where))
    rank = ranks_from_scores(scores)
    fields = ("completions", f"completions[].{score_field}")
    return _rendered_group(prompt, texts, rank, names, ctx, record, origin, fields, tuple(scores), attributes, name)


def parse_nectar(record: dict, origin: str, ctx: ParseContext) -> Group:
    prompt = text_field(record, "prompt")
    if not prompt.rstrip().endswith(ASSISTANT):
        raise RecordError("bad_turns", f"field 'prompt' must end on {ASSISTANT!r} (Nectar's HH turns)", "prompt")
    prompt = prompt.rstrip()
    texts, places, names = [], [], []
    for k, item in enumerate(list_field(record, "answers")):
        where = f"answers[{k}]"
        answer = _object(item, where)
        text = string_of(answer.get("answer"), f"{where}.answer")
        place = answer.get("rank")
        if place is None:
            raise RecordError("missing_rank", f"field '{where}.rank' is missing", f"{where}.rank")
        # the card says int; a Parquet column of ranks may come back as floats (2.0): a whole number either way
        if isinstance(place, bool) or not isinstance(place, (int, float)) or not float(place).is_integer():
            message = f"field '{where}.rank' must be a whole number, got {place!r}"
            raise RecordError("not_a_number", message, f"{where}.rank")
        texts.append(text if text[:1].isspace() else " " + text)
        places.append(int(place))
        names.append(f"{where}.answer")
    rank = ranks_from_places(places, "answers[].rank")
    starts = None
    if ctx.renderer.version >= 2 and holds_hh_turns(prompt):  # read as its turns, rendered as every prompt is
        text = rendered(prompt, texts, names, ctx.renderer)  # (text_rule.py), the text `/score_groups` builds
        prompt, texts, starts = text.prompt, list(text.responses), text.turn_starts
    subset = subset_of(record, ctx.subset)
    return checked_group(prompt, texts, rank, names, subset, origin, "answers", "answers[].rank", turn_starts=starts)


def parse_rewardbench2(record: dict, origin: str, ctx: ParseContext) -> Group:
    prompt = user_prompt(record, "prompt")
    chosen, rejected = list_field(record, "chosen"), list_field(record, "rejected")
    for name, texts in (("chosen", chosen), ("rejected", rejected)):
        if not texts:
            message = f"field {name!r} is empty: a RewardBench 2 record needs at least one chosen and one rejected"
            raise RecordError("too_few_responses", message, name)
    names = [f"chosen[{k}]" for k in range(len(chosen))] + [f"rejected[{k}]" for k in range(len(rejected))]
    texts = [string_of(t, name) for t, name in zip(chosen + rejected, names, strict=True)]
    rank = (0,) * len(chosen) + (1,) * len(rejected)  # chosen tie among themselves, as do rejected
    return _rendered_group(prompt, texts, rank, names, ctx, record, origin, ("chosen", "rejected"))


def parse_responses(record: dict, origin: str, ctx: ParseContext) -> Group:
    raw = record.get("prompt")
    prompt = messages_from(raw, "prompt") if isinstance(raw, list) else user_prompt(record, "prompt")
    texts, values, names, kinds, attributes = [], [], [], set(), []
    for k, item in enumerate(list_field(record, "responses")):
        where = f"responses[{k}]"
        response = _object(item, where)
        attributes.append(scores_from(response.get("attributes"), f"{where}.attributes"))
        if "messages" in response:
            texts.append(messages_from(response["messages"], f"{where}.messages"))
        else:
            texts.append(string_of(response.get("text"), f"{where}.text"))
        kind = "score" if "score" in response else "rank" if "rank" in response else None
        if kind is None:
            raise RecordError("missing_field", f"field '{where}' has neither 'score' nor 'rank'", where)
        kinds.add(kind)
        values.append(score_of(response[kind], f"{where}.{kind}"))
        names.append(where)
    if len(kinds) > 1:
        raise RecordError("mixed_order", "some responses have a score and others a rank: give one kind", "responses")
    kind = next(iter(kinds), "score")
    if any(v is None for v in values):
        missing = names[values.index(None)]
        raise RecordError("missing_rank", f"field '{missing}.{kind}' is missing", f"{missing}.{kind}")
    if kind == "rank":
        if any(v != int(v) for v in values):
            message = "field 'responses[].rank' must hold whole numbers"
            raise RecordError("missing_rank", message, "responses[].rank")
        rank = ranks_from_places([int(v) for v in values], "responses[].rank")
        scores = None
    else:
        rank, scores = ranks_from_scores(values), tuple(values)
    fields = ("responses", f"responses[].{kind}")
    return _rendered_group(prompt, texts, rank, names, ctx, record, origin, fields, scores, attributes)
