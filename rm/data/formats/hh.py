"""The HH-RLHF text format: "\\n\\nHuman: …\\n\\nAssistant: …" turns, and the prompt/response split.

A pair in HH-RLHF is two full conversations. They usually share every turn but the last assistant
answer, but not always (4 of the 2,312 harmless-base test pairs part earlier), so the split works on
turns: the prompt is every turn the two conversations share, cut back to end on an "\\n\\nAssistant:"
tag, and each response is the rest of its conversation, so that `prompt + response` gives back the
original text exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rm.data.formats.turns import split_index
from rm.errors import RecordError

HH_SUBSETS = ("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")
"""The four preference subsets of Anthropic/hh-rlhf (red-team-attempts is not preference data)."""
HUMAN = "\n\nHuman:"
ASSISTANT = "\n\nAssistant:"
_TAG = re.compile(r"(\n\nHuman:|\n\nAssistant:)")


@dataclass(frozen=True)
class Turn:
    role: str
    """"Human" or "Assistant"."""
    text: str
    """Everything after the tag up to the next tag, leading space included."""

    @property
    def tag(self) -> str:
        return HUMAN if self.role == "Human" else ASSISTANT


def parse_turns(text: str) -> list[Turn]:
    """Split an HH conversation into turns. Raises ValueError if it does not start with a tag."""
    parts = _TAG.split(text)
    if parts[0] != "":
        raise ValueError(f"does not start with {HUMAN!r} or {ASSISTANT!r}: {text[:40]!r}")
    return [Turn(tag.strip().rstrip(":"), body) for tag, body in zip(parts[1::2], parts[2::2], strict=True)]


def split_pair(chosen: str, rejected: str) -> tuple[str, str, str]:
    """Return (prompt, chosen_response, rejected_response) with prompt + response == original.

    The prompt ends on the "\\n\\nAssistant:" tag of the turn `rm.data.formats.turns.split_index` picks.
    Raises `RecordError` (a ValueError) for identical or unsplittable conversations. Turns are compared as
    (tag, text) tuples rather than `Turn`s: building and comparing 836,850 dataclasses was a third of
    reading 168,000 HH records.
    """
    c, r = _tag_text(chosen), _tag_text(rejected)
    k = split_index(c, r, lambda t: t[0] == ASSISTANT)
    end = sum(len(tag) + len(text) for tag, text in c[:k]) + len(ASSISTANT)
    return chosen[:end], chosen[end:], rejected[end:]


def _tag_text(text: str) -> list[tuple[str, str]]:
    parts = _TAG.split(text)
    if parts[0] != "":
        raise RecordError("bad_turns", f"does not start with {HUMAN!r} or {ASSISTANT!r}: {text[:40]!r}")
    return list(zip(parts[1::2], parts[2::2], strict=True))
