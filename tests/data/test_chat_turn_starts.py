"""Turn starts of a long chat-template conversation: the ones rendering every prefix gives, without rendering every
prefix (quadratic in the turns: 1,201 messages took 2.6 s, 4,801 took 32 s)."""

import pytest

from rm.data.formats.chat import Message, Renderer
from rm.tokens.tokenizer import HH_CHAT_TEMPLATE, train_bpe

CHATML = (
    "{%- if messages[0]['role'] != 'system' -%}<|im_start|>system\nYou are kind.<|im_end|>\n{%- endif -%}"
    "{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)
# A conversation's end is marked: a prefix ends differently from the same turns inside the whole (no turn starts).
LAST_MARKED = (
    "{%- for m in messages -%}[{{ m['role'] }}] {{ m['content'] }}"
    "{%- if loop.last and not add_generation_prompt %} (end){% endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}[assistant]{%- endif -%}"
)
# Contents trimmed of their surrounding whitespace, as Llama 3's template writes them (`content | trim`).
TRIMMED = "{%- for m in messages -%}\n\n{{ m['role'] }}: {{ m['content'] | trim }}{%- endfor -%}"


def every_prefix(renderer: Renderer, prompt: list[Message]) -> tuple[int, ...]:
    """The turn starts as the renderer found them before: each prefix rendered, kept where it starts the prompt."""
    head = renderer._apply(prompt, generation=True)
    starts = []
    for i in range(1, len(prompt)):
        if prompt[i].role == "user":
            before = renderer._apply(prompt[:i], generation=False)
            if head.startswith(before):
                starts.append(len(before) - len(renderer.bos))
    return tuple(starts)


def conversation(n: int, system: bool = False) -> list[Message]:
    messages = [Message("user" if i % 2 == 0 else "assistant", f" turn {i} says {'ab ' * (i % 7)}") for i in range(n)]
    return [Message("system", "Be brief."), *messages] if system else messages


@pytest.fixture(scope="module")
def tok():
    return train_bpe(["turn says ab"] * 10, 300)


@pytest.mark.parametrize("template", [HH_CHAT_TEMPLATE, CHATML, LAST_MARKED, TRIMMED])
@pytest.mark.parametrize("system", [False, True])
def test_turn_starts_equal_those_of_every_prefix(tok, template, system):
    tok.chat_template = template
    renderer = Renderer(tok)
    for n in (1, 3, 17, 41):
        prompt = conversation(n, system)
        got = renderer.group(prompt, [[Message("assistant", "ok")]], ["chosen"])
        assert got.turn_starts == every_prefix(renderer, prompt), (n, template)


@pytest.mark.parametrize("template", [HH_CHAT_TEMPLATE, CHATML, TRIMMED])
@pytest.mark.slow
def test_a_conversation_of_1201_messages_is_rendered_a_few_times_not_once_per_turn(tok, monkeypatch, template):
    tok.chat_template = template
    renderer = Renderer(tok)
    rendered = []
    apply = renderer._apply

    def counted(messages: list[Message], generation: bool) -> str:
        rendered.append(len(messages))
        return apply(messages, generation)

    monkeypatch.setattr(renderer, "_apply", counted)
    got = renderer.group(conversation(1201), [[Message("assistant", "ok")]], ["chosen"])
    assert len(got.turn_starts) == 600
    assert len(rendered) <= 8 and sum(rendered) <= 6 * 1201  # the linear way: 600 renders, 360,000 messages
    assert got.turn_starts == every_prefix(Renderer(tok), conversation(1201))
