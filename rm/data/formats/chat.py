"""Conversations as lists of {role, content} messages: split into a shared prompt and two responses, then text.

A pair of conversations shares its first messages; the prompt is every shared message up to the
first assistant message where the two part (walking back to one both have, as `rm.data.formats.hh.split_pair`
does for HH text), so pairs that part before the final turn keep all their turns.

Text comes from the tokenizer's chat template when it has one (a pretrained chat model should see
its own format), and otherwise from HH text ("\\n\\nHuman: …\\n\\nAssistant: …"), the explicit
template rm trains its own tokenizers on and whose turn tags the collator cuts long prompts at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rm.config.checks import TEXT_VERSIONS
from rm.data.formats.turns import split_index
from rm.errors import DataError, RecordError

ROLES = ("system", "user", "assistant")
HH_TAGS = {"system": "System", "user": "Human", "assistant": "Assistant"}
MARK = "\ue000"
"""A private-use character: no template writes it, so the text before it is the template's opening of a turn."""
CHECKED_TURNS = 8
"""Later user turns up to which every prefix is rendered (more: one render with markers, three prefixes checked)."""


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass
class RenderedPair:
    """Text of one pair; `prompt + chosen` is the whole chosen conversation as the model sees it."""

    prompt: str
    chosen: str
    rejected: str
    turn_starts: tuple[int, ...] | None
    """Offsets in `prompt` where a user turn starts (where a long prompt may be cut); None: find HH tags."""
    parts_early: bool
    """True when the conversations part before the final assistant turn."""


@dataclass
class RenderedGroup:
    """Text of one prompt and its K responses; `prompt + responses[k]` is conversation k as the model sees it."""

    prompt: str
    responses: tuple[str, ...]
    turn_starts: tuple[int, ...] | None
    """As `RenderedPair.turn_starts`."""


def messages_from(value: Any, field: str) -> list[Message]:
    """Validate a list of {role, content} dicts; anything else is a RecordError naming the item."""
    if not isinstance(value, list):
        raise RecordError(
            "not_a_list", f"field {field!r} must be a list of messages, got {type(value).__name__}", field
        )
    if not value:
        raise RecordError("empty_response", f"field {field!r} is an empty list of messages", field)
    out = []
    for i, m in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(m, dict):
            raise RecordError("bad_message", f"field {where!r} must be an object with role and content", field)
        if m.get("role") not in ROLES:
            raise RecordError("bad_message", f"field '{where}.role' is {m.get('role')!r}, not one of {ROLES}", field)
        if not isinstance(m.get("content"), str):
            got = type(m.get("content")).__name__
            raise RecordError("not_a_string", f"field '{where}.content' must be a string, got {got}", field)
        out.append(Message(m["role"], m["content"]))
    return out


def split_messages(chosen: list[Message], rejected: list[Message]) -> tuple[list[Message], ...]:
    """(prompt, chosen_rest, rejected_rest): both rests start with the assistant message where they part."""
    k = split_index(chosen, rejected, lambda m: m.role == "assistant")
    for name, rest in (("chosen", chosen[k:]), ("rejected", rejected[k:])):
        if not rest[0].content.strip():
            raise RecordError("empty_response", f"field {name!r} has an empty response after the prompt", name)
    return chosen[:k], chosen[k:], rejected[k:]


def hh_text(messages: list[Message]) -> str:
    return "".join(f"\n\n{HH_TAGS[m.role]}: {m.content}" for m in messages)


def puts_tokens_in_front(tokenizer: Any) -> bool:
    """Whether `add_special_tokens=True` puts ids in front of a text (e.g. Llama's BOS): the test behind
    `rm.tokens.tokenizer.special_prefix`, asked here because data sits below the tokens layer."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    return list(full[: len(plain)]) != list(plain) and any(
        list(full[i : i + len(plain)]) == list(plain) for i in range(1, len(full) - len(plain) + 1)
    )


class Renderer:
    """Turns message lists into pair text: with the tokenizer's chat template, or as HH text."""

    def __init__(self, tokenizer: Any = None, mode: str = "auto", version: int = TEXT_VERSIONS[-1]):
        self.version = version
        """data.text_version: the record -> text rule of the model's training (rm/data/formats/text_rule.py)."""
        self._opening: str | None = None
        has_template = tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))
        if mode == "tokenizer" and not has_template:
            raise DataError("data.chat_template is 'tokenizer' but the tokenizer has no chat template")
        self.tokenizer = tokenizer if has_template and mode != "hh" else None
        # The collator puts the tokenizer's own prefix (e.g. BOS) in front of every prompt; a template
        # that writes it too would give two.
        self.bos = ""
        if self.tokenizer is not None and getattr(tokenizer, "bos_token", None):
            self.bos = tokenizer.bos_token if puts_tokens_in_front(tokenizer) else ""

    def user_opening(self) -> str:
        """The text the chat template writes before a user message's content ("<|im_start|>user\\n"), "" where it
        writes none (the concatenating template), writes HH's own tag (read as turns instead), or there is none."""
        if self._opening is None:
            text = ""
            if self.tokenizer is not None:
                try:
                    text = self._apply([Message("user", MARK)], generation=False)
                except RecordError:  # a template that takes no lone user message: nothing to look for
                    text = ""
            before, _, after = text.partition(MARK)
            opening = before.removeprefix(self.bos).strip()
            # A template that writes a default system message first (Qwen2.5, Llama 3) closes it as it closes the
            # user's: the opening is what follows that close ("<|im_start|>user", not the system text before it).
            if (close := after.strip()) and close in opening:
                opening = opening.rsplit(close, 1)[1].strip()
            self._opening = "" if opening in ("", "Human:") or MARK not in text else opening
        return self._opening

    @property
    def name(self) -> str:
        return "tokenizer chat template" if self.tokenizer is not None else "hh"

    def pair(self, chosen: list[Message], rejected: list[Message]) -> RenderedPair:
        prompt, c_rest, r_rest = split_messages(chosen, rejected)
        early = len(c_rest) > 1 or len(r_rest) > 1
        text = self.group(prompt, [c_rest, r_rest], ["chosen", "rejected"])
        return RenderedPair(text.prompt, *text.responses, text.turn_starts, early)

    def group(self, prompt: list[Message], rests: list[list[Message]], names: list[str]) -> RenderedGroup:
        """A prompt's messages and K continuations of it (each starting with an assistant message) as text:
        `prompt + responses[k]` is conversation k as the model sees it. `names` name each continuation's
        field in errors."""
        if self.tokenizer is None:
            texts = tuple(" " + rest[0].content + hh_text(rest[1:]) for rest in rests)
            return RenderedGroup(hh_text(prompt) + "\n\nAssistant:", texts, None)
        head = self._apply(prompt, generation=True)
        texts = []
        for name, rest in zip(names, rests, strict=True):
            full = self._apply(prompt + rest, generation=False)
            if not full.startswith(head):
                msg = "the chat template does not render the prompt as the start of the conversation (try hh)"
                raise RecordError("chat_template", msg, name)
            texts.append(full[len(head) :])
        return RenderedGroup(head[len(self.bos) :], tuple(texts), self._turn_starts(prompt, head))

    def _turn_starts(self, prompt: list[Message], head: str) -> tuple[int, ...]:
        """Where each later user turn starts in `head`: the length of the conversation rendered up to it, where that
        is the start of `head`. Rendering every prefix is quadratic in the turns (1,201 messages took 2.6 s, 4,801
        took 32 s), so a template that renders each message in place is read from one render with markers for
        contents (`_marked_starts`), checked against the prefixes rendered for the first, middle and last turns."""
        users = [i for i in range(1, len(prompt)) if prompt[i].role == "user"]
        marked = self._marked_starts(prompt, users, head) if len(users) > CHECKED_TURNS else None
        checked = users if marked is None else [users[0], users[len(users) // 2], users[-1]]
        found = {i: self._start(prompt, i, head) for i in checked}
        if marked is not None and any(marked[i] != found[i] for i in checked):
            found = {i: self._start(prompt, i, head) for i in users}  # a template of its own kind: each prefix
        elif marked is not None:
            found = marked
        return tuple(found[i] - len(self.bos) for i in users if found[i] is not None)

    def _start(self, prompt: list[Message], i: int, head: str) -> int | None:
        before = self._apply(prompt[:i], generation=False)
        return len(before) if head.startswith(before) else None

    def _marked_starts(self, prompt: list[Message], users: list[int], head: str) -> dict[int, int | None] | None:
        """`_start` for each of `users`, from one render whose contents are markers: a turn starts where the message
        before it ends, its closing text being that of the first message of its role (rendered alone with the
        messages before it). None where the template does not put each content in place as written, or trimmed of
        its surrounding whitespace (Llama 3's template writes `content | trim`)."""
        marks = [f"\ue000{j}\ue001" for j in range(len(prompt))]  # private-use characters: no template writes them
        marked = [Message(m.role, k) for m, k in zip(prompt, marks, strict=True)]
        text = self._apply(marked, generation=True)
        for written in (str, str.strip):  # the contents as the template writes them
            ends, shift, pieces, at = [], [], [], 0  # where each marker ends; real minus marked length before it
            for m, k in zip(prompt, marks, strict=True):
                where = text.find(k, at)
                if where < 0:
                    return None
                pieces += [text[at:where], written(m.content)]
                at = where + len(k)
                ends.append(at)
                shift.append((shift[-1] if shift else 0) + len(written(m.content)) - len(k))
            if "".join(pieces) + text[at:] == head:
                break
        else:
            return None
        closing: dict[str, str] = {}
        out: dict[int, int | None] = {}
        for i in users:
            role = prompt[i - 1].role
            if role not in closing:
                first = next(j for j in range(i) if prompt[j].role == role)
                alone = self._apply(marked[: first + 1], generation=False)
                closing[role] = alone[ends[first] :] if alone[: ends[first]] == text[: ends[first]] else "\x00"
            end = ends[i - 1] + len(closing[role])
            out[i] = end + shift[i - 1] if text[ends[i - 1] : end] == closing[role] else None
        return out

    def _apply(self, messages: list[Message], generation: bool) -> str:
        rows = [{"role": m.role, "content": m.content} for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(rows, tokenize=False, add_generation_prompt=generation)
        except Exception as e:  # noqa: BLE001 - a template's own error (e.g. roles must alternate), per record
            raise RecordError("chat_template", f"the chat template failed: {e}") from None
        if self.bos and not text.startswith(self.bos):
            self.bos = ""  # this template does not write BOS itself: nothing to strip
        return text
