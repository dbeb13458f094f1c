"""The record -> text rule: what a prompt given as a string means, in every format and every entry point.

Training's parsers of the K-response and rows formats (ranked.py, rows.py), `rm score`'s `prompt` + `response`
(rm/evaluation/record_texts.py), `rm serve`'s groups (rm/serve/bodies.py) and the suites all turn a prompt into
messages here, and the renderer (chat.py: the tokenizer's chat template, or HH text) turns the messages into text,
so one record is one text wherever it is read. The rule is versioned as `data.text_version` and saved with every
run and export (rm/config/exportdir.py reads it back), so an export is scored by the rule it was trained with:

- version 2 (the default): a prompt that is a list of messages is those messages. A string prompt is one user
  message, unless it already holds HH turns (it starts with "\\n\\nHuman:"): then it is read as those turns, the
  final empty "\\n\\nAssistant:" tag being where the answer goes, and each string response is an HH answer whose
  first space belongs to the tag (" 4" after "\\n\\nAssistant:" is the answer "4", as in the HH-RLHF text). A
  string prompt holding the chat template's own user turn (e.g. "<|im_start|>user\\n") is refused in one line
  naming the field: a template's text cannot be read back into messages in general, so give a message list.
- version 1 (runs saved before the key existed): a string prompt is always one user message, so an HH prompt was
  wrapped again ("\\n\\nHuman: \\n\\nHuman: 2+2?\\n\\nAssistant:\\n\\nAssistant:"), and `rm score`/`rm serve`
  joined a string prompt and its response as written ("What is 2 + 3?2 plus 3 is 5."), another text than training's.

Whole texts are not prompts and are read as written in both versions: HH `chosen`/`rejected` conversations, `text`
and `transcript` fields, and the pairwise `prompt`/`chosen`/`rejected` strings, which TRL's and OpenRLHF's standard
format train as `prompt + chosen` with nothing between (the export's chat template then concatenates too).

How a response ends is the rule's last step, `data.eos` (saved beside `data.text_version`; an export keeps it in
config.json as `rm_eos`, and one without the record is read as none), applied by `response_end` to every response
that training, `rm eval`, `rm score`, the suites and `rm serve` tokenize (through rm/tokens/ids.py's `EndOfSequence`):

- none (the default): as written; the reward is read at the response's own last token.
- eos: the tokenizer's EOS text after it, as TRL's `RewardTrainer` (1.16, `_prepare_dataset`) appends
  `eos_token` to a plain-text chosen and rejected that do not already end with it before tokenizing.
- space_eos: trailing newlines dropped, then " " and the EOS text, as OpenRLHF's `RewardDataset` (0.11.2,
  `__getitem__`) writes `(prompt + response).rstrip("\n") + " " + eos_token` unless that already ends with EOS.

A text already ending with the EOS text is kept as it is in both (never two EOS), so a rollout decoded with its EOS
(OpenRLHF's PPO sends those) reads as the policy wrote it. Both tools tokenize the EOS as text, so the EOS id is
what the tokenizer makes of that text (its eos id: checked where the ids are made).
"""

from __future__ import annotations

from rm.config.checks import EOS_CONVENTIONS, TEXT_VERSIONS
from rm.data.formats.chat import Message, Renderer
from rm.data.formats.hh import ASSISTANT, HUMAN, parse_turns
from rm.errors import RecordError

TEXT_VERSION = TEXT_VERSIONS[-1]
"""The rule of new runs, and of models rm did not train (their own chat template then writes every prompt)."""


def holds_hh_turns(text: str) -> bool:
    """Whether a string prompt is HH text: it starts (after blank space) with the "Human:" tag."""
    return text.lstrip(" \n").startswith(HUMAN.lstrip())


def hh_messages(text: str, field: str) -> list[Message]:
    """An HH prompt as messages: each turn's text without the space after its tag, the final empty
    "\\n\\nAssistant:" tag dropped. A prompt that ends with an answer, or holds no words, is a bad record."""
    turns = parse_turns("\n\n" + text.lstrip(" \n"))
    if turns[-1].role == "Assistant" and not turns[-1].text.strip():
        turns = turns[:-1]
    if not turns or turns[-1].role == "Assistant":
        message = f"field {field!r} ends with the assistant's answer: an HH prompt ends on {ASSISTANT!r}"
        raise RecordError("bad_turns", message, field)
    if not any(t.text.strip() for t in turns):
        raise RecordError("empty_prompt", f"field {field!r} is empty: it would train as an empty user turn", field)
    return [Message("user" if t.role == "Human" else "assistant", t.text.removeprefix(" ")) for t in turns]


def prompt_messages(
    prompt: str | list[Message], renderer: Renderer, field: str = "prompt"
) -> tuple[list[Message], bool]:
    """(the prompt's messages, whether it was HH text): a string prompt by the renderer's `version` of the rule."""
    if not isinstance(prompt, str):
        return prompt, False
    if renderer.version >= 2 and holds_hh_turns(prompt):
        return hh_messages(prompt, field), True
    opening = renderer.user_opening() if renderer.version >= 2 else ""
    if opening and opening in prompt:
        message = (
            f"field {field!r} already holds the chat template's turns ({opening!r}): give the prompt as a list of "
            "messages, which the template renders once"
        )
        raise RecordError("template_turns", message, field)
    return [Message("user", prompt)], False


def answer_message(text: str, after_hh: bool) -> Message:
    """A string response as the assistant's message: after an HH prompt its first space is the tag's."""
    return Message("assistant", text.removeprefix(" ") if after_hh else text)


def response_end(response: str, eos: str, eos_token: str) -> str:
    """A response's text as `eos` (data.eos, one of EOS_CONVENTIONS) ends it, `eos_token` being the tokenizer's EOS
    text; a response already ending with that text is not given a second one."""
    if eos not in EOS_CONVENTIONS:
        raise ValueError(f"data.eos: {eos!r} is not one of {EOS_CONVENTIONS}")
    if eos == "space_eos":
        response = response.rstrip("\n")
    if eos == "none" or response.endswith(eos_token):
        return response
    return response + (" " if eos == "space_eos" else "") + eos_token
