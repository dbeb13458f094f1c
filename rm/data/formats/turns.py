"""The prompt/response split of two conversations that share a beginning, on turns of any kind.

HH text (`rm/data/hh.py`) and message lists (`rm/data/chat.py`) both call `split_index`, so the two
formats agree on where a pair parts, and on what is refused: identical conversations, conversations
with no assistant turn in common, and conversations whose shared part is empty (no prompt).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from rm.errors import RecordError

T = TypeVar("T")


def split_index(chosen: Sequence[T], rejected: Sequence[T], is_assistant: Callable[[T], bool]) -> int:
    """k such that `chosen[:k]` (== `rejected[:k]`) is the prompt and each response starts at turn k.

    k is the first assistant turn at or before the point where the conversations part, and both
    conversations have an assistant turn there. When they part at a user turn, the shared assistant
    turn before it moves into both responses, so the prompt still ends where an assistant speaks.
    """
    first_diff = 0
    while first_diff < min(len(chosen), len(rejected)) and chosen[first_diff] == rejected[first_diff]:
        first_diff += 1
    if first_diff == len(chosen) == len(rejected):
        raise RecordError("identical", "chosen and rejected are identical")
    k = min(first_diff, len(chosen) - 1, len(rejected) - 1)
    while k >= 0 and not (is_assistant(chosen[k]) and is_assistant(rejected[k])):
        k -= 1
    if k < 0:
        raise RecordError("bad_turns", "chosen and rejected share no assistant turn to split on")
    if k == 0:
        raise RecordError("bad_turns", "the conversation starts with the assistant's answer: there is no prompt")
    return k
