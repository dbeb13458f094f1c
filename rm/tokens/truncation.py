"""The one rule that fits a text into `collator.max_length`, used by training, `rm eval` and `rm score` alike.

A sequence is `prefix + prompt + response` (the prefix being what the tokenizer puts in front of a text,
e.g. Llama's BOS). Every response of a group must fit beside the prompt, so the room for the prompt is
`max_length - len(prefix) - longest response`:

1. The prompt fits: nothing changes.
2. It does not: it loses whole leading turns, oldest first (the final question stays), re-tokenized from
   the text that starts at each later user turn; the first shorter prompt that fits is kept. Which one that is
   `rm.tokens.turn_search` finds by tokenizing a few of them, not each: a prompt of thousands of turns would
   cost quadratic time and memory.
3. Even its last turn alone is too long: that turn keeps its newest tokens.
4. A response cannot fit even with an empty prompt, or leaves no token for a prompt that has some. What then
   is the policy, `Fit`, named by each caller of `fit_group`:
   - `Fit.DROP` (training and `rm eval`): such a response leaves its group, counted, if the rest still compare
     (the caller says, e.g. two of them ranked); else the group is dropped (it is listed). A reward read without
     the prompt scores the answer alone (`collator.max_length=1` trained on single response tokens).
   - `Fit.KEEP_END` (`rm score`): nothing is dropped. A group that cannot fit together is fitted one response at
     a time; a response too long even alone keeps its last tokens, where the reward is read, and says so.

So one long multi-turn record gets the same reward from training's eval, `rm eval` and `rm score`. An
exported tokenizer's `truncation_side: left` cuts tokens instead of turns: a client that tokenizes by
itself gets the same ids unless the prompt is longer than `max_length` (the model card says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from rm.data.formats.hh import HUMAN

Ids = Sequence[int]
Shorter = Callable[[int], list[Ids]]
"""room -> ids of `later_turns` of the prompt, longest first, at least up to the first of at most `room` tokens
(`rm.tokens.turn_search.fitting_turns` gives just that one, or the last turn where none fits)."""


class Fit(Enum):
    """What rule 4 does with a response that leaves no token for the prompt (see the module's docstring)."""

    DROP = "drop"
    """Training and `rm eval`: the response leaves its group, or the group goes; a pair is never half-read."""
    KEEP_END = "keep_end"
    """`rm score`: every response is scored, fitted alone where the group cannot fit together."""


@dataclass
class Truncated:
    """What the rule made of one prompt and its responses."""

    prompt_ids: list[int] | None
    """The prefix and the prompt ids that fit; None when the group is dropped (no room for the prompt)."""
    response_ids: list[Ids]
    """The responses, whole; a response cut to its end only under `keep_response_end`."""
    prompt_truncated: bool = False
    """The prompt lost leading turns (or tokens) to fit."""
    cut_inside_turn: bool = False
    """Even its last turn was too long, so that turn's oldest tokens went too."""
    response_truncated: bool = False
    """A response lost its first tokens (`keep_response_end` only)."""

    @property
    def dropped(self) -> bool:
        return self.prompt_ids is None

    @property
    def truncated(self) -> bool:
        return self.prompt_truncated or self.response_truncated


@dataclass
class Fitted:
    """What `fit_group` made of one prompt and its responses."""

    parts: list[Truncated]
    """Each prompt with the responses fitted beside it: one part for the group, or under `Fit.KEEP_END` one part
    per response where the group could not fit together; none where the group is dropped."""
    kept: list[int]
    """The input positions of the responses kept, in the order the parts hold them."""
    responses_dropped: int = 0
    """Responses that left a group that stays (`Fit.DROP`); a dropped group's are not counted."""

    @property
    def dropped(self) -> bool:
        return not self.parts

    @property
    def prompt_truncated(self) -> bool:
        return any(p.prompt_truncated for p in self.parts)

    @property
    def cut_inside_turn(self) -> bool:
        return any(p.cut_inside_turn for p in self.parts)


def turn_starts(prompt: str, given: Sequence[int] | None = None, lowest: int = 1) -> list[int]:
    """Where the later user turns of `prompt` start, at `lowest` or after, ascending: where the pair says
    (chat-template text), else at each "\\n\\nHuman:" tag (HH text), found from the end (str.rfind, so a prompt
    of 100,000 turns costs only the tail that could fit)."""
    if given is not None:
        return [i for i in given if max(lowest, 1) <= i < len(prompt)]
    starts, end = [], len(prompt)
    while (i := prompt.rfind(HUMAN, max(lowest, 1), end)) >= 0:
        starts.append(i)
        end = i + len(HUMAN) - 1  # the tag cannot overlap itself: the next one starts before i
    return starts[::-1]


def last_turn_start(prompt: str, given: Sequence[int] | None = None) -> int | None:
    """Where the last later user turn starts (None: the prompt has one turn)."""
    if given is None:
        i = prompt.rfind(HUMAN, 1)
        return i if i >= 0 else None
    return next((i for i in reversed(given) if 0 < i < len(prompt)), None)


def later_turns(prompt: str, given: Sequence[int] | None = None) -> Iterator[str]:
    """Rule 2's candidates in its order: the prompt from each later user turn, longest first, one at a time
    (all of them at once are quadratic in the turns). The rule reads them through `rm.tokens.turn_search`,
    which finds the same one without tokenizing each."""
    return (prompt[i:] for i in turn_starts(prompt, given))


def prompt_room(response_ids: list[Ids], max_length: int, prefix: Ids) -> int:
    """Tokens left for the prompt beside the group's longest response (negative: a response alone is too long)."""
    return max_length - len(prefix) - max(len(r) for r in response_ids)


def staying(prompt_ids: Ids, response_ids: list[Ids], max_length: int, prefix: Ids) -> list[int]:
    """Positions of the responses that leave room for a prompt token (all of them, for an empty prompt, that fit
    beside the prefix): under `Fit.DROP` the others leave their group."""
    room = max_length - len(prefix)
    return [k for k, r in enumerate(response_ids) if len(r) < room or (len(r) == room and not len(prompt_ids))]


def search_room(prompt_ids: Ids, response_ids: list[Ids], max_length: int, prefix: Ids) -> int | None:
    """The room `fit_group` under `Fit.DROP` will give `shorter_prompts`, or None where it will not call it (the
    prompt fits, or no response stays): so a caller can search many prompts' later turns in one batch first."""
    kept = [response_ids[k] for k in staying(prompt_ids, response_ids, max_length, prefix)]
    room = prompt_room(kept, max_length, prefix) if kept else 0
    return room if 0 < room < len(prompt_ids) else None


def fit_group(
    prompt_ids: Ids,
    response_ids: list[Ids],
    max_length: int,
    prefix: Ids,
    shorter_prompts: Shorter,
    policy: Fit,
    compares: Callable[[list[int]], bool] = bool,
) -> Fitted:
    """The whole rule for one prompt and its responses under `policy`. `shorter_prompts(room)` is called only
    where the prompt does not fit `room` tokens (most never need it). `compares(kept positions)`, asked under
    `Fit.DROP` only when a response leaves, says whether the rest still make a group (default: any is left)."""

    def fitted(group: list[Ids]) -> Truncated:
        def shorter() -> list[Ids]:
            return shorter_prompts(prompt_room(group, max_length, prefix))

        return truncate_group(prompt_ids, group, max_length, prefix, shorter, keep_response_end=policy is Fit.KEEP_END)

    if policy is Fit.KEEP_END:
        parts = [fitted(response_ids)]
        if parts[0].dropped:  # only a group of several is dropped: alone, each response keeps at least its end
            parts = [fitted([r]) for r in response_ids]
        return Fitted(parts, list(range(len(response_ids))))
    keep = staying(prompt_ids, response_ids, max_length, prefix)
    if not keep or (len(keep) < len(response_ids) and not compares(keep)):
        return Fitted([], [])
    cut = fitted([response_ids[k] for k in keep])  # each leaves a prompt token: never dropped
    return Fitted([], []) if cut.dropped else Fitted([cut], keep, len(response_ids) - len(keep))


def truncate_group(
    prompt_ids: Ids,
    response_ids: list[Ids],
    max_length: int,
    prefix: Ids,
    shorter_prompts: Callable[[], list[Ids]],
    keep_response_end: bool = False,
) -> Truncated:
    """Rules 1 to 4 for one prompt and responses that share it, fitted together; `fit_group` is what callers use.
    `shorter_prompts()` gives what a `Shorter` gives for this group's room; it is called only when the prompt does
    not fit. Under `keep_response_end` (`Fit.KEEP_END`) a lone response too long keeps its end; a group of several
    is dropped."""
    room = prompt_room(response_ids, max_length, prefix)
    if room < 0 or (room == 0 and len(prompt_ids) and not keep_response_end):  # no token of the prompt would stay
        if not keep_response_end or len(response_ids) != 1:
            return Truncated(None, response_ids)
        keep = max_length - len(prefix)
        return Truncated(list(prefix), [list(response_ids[0][len(response_ids[0]) - keep :]) if keep else []],
                      prompt_truncated=len(prompt_ids) > 0, response_truncated=True)  # fmt: skip
    if len(prompt_ids) <= room:
        return Truncated([*prefix, *prompt_ids], response_ids)
    prompt = prompt_ids
    for prompt in shorter_prompts():  # the longest one that fits is the first
        if len(prompt) <= room:
            return Truncated([*prefix, *prompt], response_ids, prompt_truncated=True)
    prompt = list(prompt[len(prompt) - room :]) if room else []  # the last turn's newest tokens
    return Truncated([*prefix, *prompt], response_ids, prompt_truncated=True, cut_inside_turn=True)
