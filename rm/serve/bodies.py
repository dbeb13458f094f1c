"""A request body, checked whole and tokenized, before it may join a batch: a bad request is refused here.

Every text becomes a `ScoreText` the way `rm score` reads the same text from a file (rm/evaluation/record_texts.py),
and an item's texts the groups `rm score` encodes them as (a text alone a group of one), so the rewards are
`rm score`'s:

- `/score` `texts` and `/get_reward` `query`: each as a `{"text": ...}` record (split at its last "Assistant:" tag);
- `/score` `messages`: each conversation as a `responses` record renders its prompt and one answer (the messages
  up to the final run of assistant messages are the prompt; the model's chat template, else HH text);
- `/score_groups`: a group rendered as a `responses` record renders it (a text prompt as a user message, or the HH
  turns it holds: rm/data/formats/text_rule.py; `prompt + response` as written for a model saved with
  data.text_version 1). A group's texts are fitted into max_length together,
  as `rm score` fits a K-response record, so its prompt is cut once and computed once;
- flat texts of one `/score` or `/get_reward` request whose prompts have the same ids go to the batcher as one
  group (`batched`), each keeping the reward it gets alone.

Errors: 400 for what is not the API's shape (malformed JSON, a lone surrogate or nesting past 32 levels
(rm/serve/json_body.py), wrong types, unknown fields), 413 for too much (more than --max-texts), 422 for a
well-formed text that cannot be scored (empty, over max_length with --on-too-long error, a chat template that
fails on it). Each a one-line message naming the item.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from rm.collate.scoring import by_prompt
from rm.data.formats.chat import Message, messages_from
from rm.data.formats.ranked import rendered
from rm.errors import RecordError
from rm.evaluation.record_texts import GROUP_KEY, ScoreText, texts_of
from rm.serve.batch_plan import Output
from rm.serve.json_body import RequestError, decode, kind
from rm.serve.scorer import Scorer
from rm.tokens.store import EncodedGroup

SHAPE_REASONS = ("not_a_list", "not_an_object", "bad_message", "not_a_string", "missing_field")
"""RecordError reasons that mean a body of the wrong shape (400); any other reason is a text that cannot be scored."""


@dataclass
class Prepared:
    """A checked request: `items[i]` holds the groups whose rewards answer item i (one text, or a /score_groups
    group): what `rm score` encodes its texts as, usually one group, several where a response had to be fitted on
    its own; item i's texts are their responses, group after group."""

    items: list[list[EncodedGroup]]
    grouped: bool
    """True: the answer is one list per item (/score_groups); False: one reward per item."""
    jobs: list[list[EncodedGroup]] = field(init=False)
    """The items the batcher scores (`batched`): a flat request's texts that share a prompt as one group."""
    where: list[tuple[int, int | None]] = field(init=False)
    """Where item i's rewards are among the jobs': (k, None) for job k whole, (k, j) for its j-th reward."""

    def __post_init__(self) -> None:
        # Made with the request, in the thread that prepares it, not on the event loop.
        self.jobs, self.where = batched(self.items, self.grouped)

    def answers(self, raw: list[list[Output]]) -> list[list[Output]]:
        """Each item's raw rewards from the jobs' rewards."""
        return [raw[k] if j is None else [raw[k][j]] for k, j in self.where]


def batched(
    items: list[list[EncodedGroup]], grouped: bool
) -> tuple[list[list[EncodedGroup]], list[tuple[int, int | None]]]:
    """`Prepared.jobs` and `Prepared.where` of these items.

    Texts of one /score or /get_reward request that share their prompt's token ids (a GRPO batch sent flat: G
    completions of a prompt) go as one group, so their prompt is computed once, on its cache or once in a packed
    row, as /score_groups computes a group's. Each text still attends to its prompt and itself only: its reward is
    the one it gets alone. Clients that can only send flat texts (OpenRLHF's) get the group endpoint's speed.
    """
    if grouped:
        return items, [(k, None) for k in range(len(items))]
    alone = [k for k, item in enumerate(items) if len(item) == 1 and len(item[0].response_ids) == 1]
    alone = [k for k in alone if len(items[k][0].prompt_ids)]  # an empty prompt has nothing to share
    jobs: list[list[EncodedGroup]] = []
    where: list[tuple[int, int | None] | None] = [None] * len(items)
    for group, rows in by_prompt([items[k][0] for k in alone]):
        if len(rows) > 1:
            for j, row in enumerate(rows):
                where[alone[row]] = (len(jobs), j)
            jobs.append([group])
    for k, item in enumerate(items):
        if where[k] is None:
            where[k] = (len(jobs), None)
            jobs.append(item)
    return jobs, [w for w in where if w is not None]


STEP_ITEMS = 16
"""Items (texts, conversations, groups) rendered and tokenized in one preparation step: ~1-20 ms of work, after
which the preparation thread turns to the next request waiting (rm/serve/preparer.py), so a small request is
never queued behind the whole of a 1,000-text one."""


def preparing(
    route: str, body: bytes, scorer: Scorer, max_texts: int, on_too_long: str
) -> Generator[None, None, Prepared]:
    """The body of a POST to `route` ("score", "score_groups" or "get_reward") as groups to score, or the
    RequestError that refuses it: a generator that pauses after each bounded step (the body's JSON and shape,
    then STEP_ITEMS items at a time) and returns the Prepared request, run off the event loop by the preparation
    thread (rm/serve/preparer.py). The body's fields and counts are checked before any item is rendered, each
    item's own content when its step comes."""
    payload = decode(body)
    if route == "score_groups":
        makers, names = group_texts(payload, scorer, max_texts)
    elif route == "get_reward":
        makers, names = query_texts(payload, scorer, max_texts)
    else:
        makers, names = score_texts(payload, scorer, max_texts)
    items: list[list[EncodedGroup]] = []
    for k, (make, name) in enumerate(zip(makers, names, strict=True)):
        if k % STEP_ITEMS == 0:
            yield
        texts = make()
        groups = guarded(lambda texts=texts: scorer.encode(texts), name) if texts else []
        if on_too_long == "error" and any(g.truncated for g in groups):
            raise RequestError(
                422,
                f"{name} does not fit max_length={scorer.max_length} tokens (this server refuses texts over "
                "max_length: --on-too-long error)",
            )
        items.append(groups)
    yield
    return Prepared(items, route == "score_groups")


Maker = Callable[[], list[ScoreText]]
"""One item's texts, rendered when called (a step of `preparing`): its shape is checked before."""


def guarded(make: Callable[[], Any], where: str) -> Any:
    """`make()`, with rm's record errors turned into the request's: 400 for a wrong shape, 422 otherwise."""
    try:
        return make()
    except RecordError as e:
        raise RequestError(400 if e.reason in SHAPE_REASONS else 422, f"{where}: {e.message}") from None


def fields(payload: dict, allowed: tuple[str, ...], where: str = "the body") -> None:
    unknown = sorted(set(payload) - set(allowed))
    if unknown:
        raise RequestError(400, f"{where} has unknown field(s) {unknown}; expected {list(allowed)}")


def listed(value: Any, name: str, item: type | None = None, what: str = "") -> list:
    if not isinstance(value, list):
        raise RequestError(400, f"{name!r} must be an array{what}, got a JSON {kind(value)}")
    for i, v in enumerate(value):
        if item is not None and not isinstance(v, item):
            raise RequestError(400, f"{name}[{i}] must be a {kind(item())}, got a JSON {kind(v)}")
    return value


def counted(n: int, max_texts: int, what: str) -> None:
    if n > max_texts:
        raise RequestError(413, f"{n} {what} in one request, over this server's --max-texts {max_texts}")


def text_item(text: str, where: str) -> list[ScoreText]:
    """A whole text as `rm score` reads a `text` record; an empty one is refused, as there is nothing to read."""
    if not text.strip():
        raise RequestError(422, f"{where} is empty")
    return guarded(lambda: texts_of({"text": text}, where), where)


def score_texts(payload: dict, scorer: Scorer, max_texts: int) -> tuple[list[Maker], list[str]]:
    fields(payload, ("texts", "messages"))
    if ("texts" in payload) == ("messages" in payload):
        raise RequestError(400, "give either 'texts' (strings) or 'messages' (conversations), not both or neither")
    if "texts" in payload:
        texts = listed(payload["texts"], "texts", str, " of strings")
        counted(len(texts), max_texts, "texts")
        names = [f"texts[{i}]" for i in range(len(texts))]
        return [lambda t=t, n=n: text_item(t, n) for t, n in zip(texts, names, strict=True)], names
    conversations = listed(payload["messages"], "messages", list, " of conversations")
    counted(len(conversations), max_texts, "conversations")
    names = [f"messages[{i}]" for i in range(len(conversations))]
    return [lambda c=c, n=n: conversation(c, n, scorer) for c, n in zip(conversations, names, strict=True)], names


def conversation(value: list, where: str, scorer: Scorer) -> list[ScoreText]:
    """A conversation ending in the assistant's answer: the answer (the final run of assistant messages) scored
    after the rest, as a `responses` record with that prompt and one response renders it."""
    messages: list[Message] = guarded(lambda: messages_from(value, where), where)
    if messages[-1].role != "assistant":
        raise RequestError(422, f"{where} must end with an assistant message (the answer to score)")
    k = len(messages)
    while k and messages[k - 1].role == "assistant":
        k -= 1
    if k == 0:
        raise RequestError(422, f"{where} has no user or system message before the assistant's answer")
    if not any(m.content.strip() for m in messages[k:]):
        raise RequestError(422, f"{where}: the assistant's answer is empty")
    text = guarded(lambda: rendered(messages[:k], [messages[k:]], [where], scorer.renderer), where)
    return [ScoreText("reward", text.prompt, text.responses[0], text.turn_starts)]


def group_texts(payload: dict, scorer: Scorer, max_texts: int) -> tuple[list[Maker], list[str]]:
    fields(payload, ("groups",))
    groups = listed(payload.get("groups"), "groups", dict, " of {prompt, responses} objects")
    for g, group in enumerate(groups):
        fields(group, ("prompt", "responses"), f"groups[{g}]")
        if not isinstance(group.get("prompt"), (str, list)):
            got = "missing" if "prompt" not in group else f"a JSON {kind(group['prompt'])}"
            raise RequestError(400, f"groups[{g}].prompt must be a string or an array of messages, got {got}")
        listed(group.get("responses"), f"groups[{g}].responses")
    counted(sum(len(group["responses"]) for group in groups), max_texts, "responses")
    names = [f"groups[{g}]" for g in range(len(groups))]
    return [lambda g=g, n=n: one_group(g, n, scorer) for g, n in zip(groups, names, strict=True)], names


def one_group(group: dict, where: str, scorer: Scorer) -> list[ScoreText]:
    prompt, responses = group["prompt"], group["responses"]
    names = [f"{where}.responses[{k}]" for k in range(len(responses))]
    if isinstance(prompt, str):
        for name, r in zip(names, responses, strict=True):
            if not isinstance(r, str):
                raise RequestError(400, f"{name} must be a string (the prompt is text), got a JSON {kind(r)}")
            if not r.strip():
                raise RequestError(422, f"{name} is empty")
        if scorer.renderer.version < 2:  # the rule such a model was trained with: prompt + response as written
            return [ScoreText(GROUP_KEY, prompt, r) for r in responses]
        if not responses:
            return []
        if not prompt.strip():  # training refuses an empty user turn (rm/data/formats/pair.py: user_prompt)
            raise RequestError(422, f"{where}.prompt is empty")
        text = guarded(lambda: rendered(prompt, responses, names, scorer.renderer, f"{where}.prompt"), where)
        return [ScoreText(GROUP_KEY, text.prompt, r, text.turn_starts) for r in text.responses]
    head = guarded(lambda: messages_from(prompt, f"{where}.prompt"), f"{where}.prompt")
    rests = [answer(r, name) for r, name in zip(responses, names, strict=True)]
    if not rests:
        return []
    text = guarded(lambda: rendered(head, rests, names, scorer.renderer), where)
    return [ScoreText(GROUP_KEY, text.prompt, r, text.turn_starts) for r in text.responses]


def answer(value: Any, where: str) -> list[Message]:
    """A response to a message-list prompt: a string, one {"role": "assistant", "content"} message, or a list."""
    if isinstance(value, str):
        messages = [Message("assistant", value)]
    else:
        messages = guarded(lambda: messages_from([value] if isinstance(value, dict) else value, where), where)
    if messages[0].role != "assistant":
        raise RequestError(400, f"{where} must start with an assistant message, got role {messages[0].role!r}")
    if not any(m.content.strip() for m in messages):
        raise RequestError(422, f"{where} is empty")
    return messages


def query_texts(payload: dict, scorer: Scorer, max_texts: int) -> tuple[list[Maker], list[str]]:
    """OpenRLHF's remote reward request: `query` (prompt and response as one decoded text) is scored; `prompts`
    and `labels` (which it sends too) are not needed for a reward model and are ignored."""
    queries = listed(payload.get("query"), "query", str, " of strings")
    counted(len(queries), max_texts, "queries")
    names = [f"query[{i}]" for i in range(len(queries))]
    return [
        lambda q=q, n=n: text_item(without_special_text(q, scorer), n) for q, n in zip(queries, names, strict=True)
    ], names


def without_special_text(text: str, scorer: Scorer) -> str:
    """A decoded rollout without the special-token text the policy's decode left around it: padding and EOS at
    the end (and padding at the start), as OpenRLHF's own reward server removed them, and a BOS at the start
    where the tokenizer puts one in front itself (rm adds it, as for every text, so it is not counted twice).
    A model trained with an EOS ending its responses (data.eos) keeps one EOS where the rollout ended with it: the
    text then ends as the policy wrote it (OpenRLHF's local reward model reads the reward there too), and scoring
    adds none (rm/data/formats/text_rule.py: a text ending with EOS is not given a second)."""
    tok = scorer.tokenizer
    ended = False  # an EOS was among the tail's special-token text
    heads = [t for t in (tok.pad_token, tok.bos_token if scorer.prefix else None) if t]
    tails = [t for t in (tok.pad_token, tok.eos_token) if t]
    changed = True
    while changed:
        changed = False
        for t in heads:
            if text.startswith(t):
                text, changed = text[len(t) :], True
        for t in tails:
            if text.endswith(t):
                text, changed, ended = text[: -len(t)], True, ended or t == tok.eos_token
    return text + tok.eos_token if ended and scorer.eos != "none" else text
