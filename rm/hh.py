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


def render(turns: list[Turn]) -> str:
    return "".join(t.tag + t.text for t in turns)


def split_pair(chosen: str, rejected: str) -> tuple[str, str, str]:
    """Return (prompt, chosen_response, rejected_response) with prompt + response == original.

    The prompt ends on the "\\n\\nAssistant:" tag of the first assistant turn at or before the
    point where the conversations part. When they part at a human turn, the shared assistant turn
    before it moves into both responses, so the prompt still ends on an assistant tag.
    """
    c, r = parse_turns(chosen), parse_turns(rejected)
    first_diff = 0
    while first_diff < min(len(c), len(r)) and c[first_diff] == r[first_diff]:
        first_diff += 1
    if first_diff == len(c) == len(r):
        raise ValueError("chosen and rejected are identical")
    # Walk back to an assistant turn that both conversations have at that index.
    k = min(first_diff, len(c) - 1, len(r) - 1)
    while k >= 0 and not (c[k].role == "Assistant" and r[k].role == "Assistant"):
        k -= 1
    if k < 0:
        raise ValueError("chosen and rejected share no assistant turn to split on")
    prompt = render(c[:k]) + ASSISTANT
    return prompt, chosen[len(prompt) :], rejected[len(prompt) :]
