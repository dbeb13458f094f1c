"""The clients return the attribute outputs the server sends: `score`, `score_messages` and `score_groups` (blocking
and async) give lists of rewards whose `attributes` holds one {name: value} per text, equal to plain transformers'
logits 1.. of the same tokens, also when a call is cut at --max-texts; a one-output model's lists have None there,
and every list still is the list of rewards it was."""

import asyncio
import json

import pytest
from in_process_server import served

from conftest import ATTRIBUTE_NAMES, plain_outputs
from rm.client import AsyncRewardClient, RewardClient, Rewards

PROMPT = "\n\nHuman: Name a colour.\n\nAssistant:"
RESPONSES = [" Red.", " Blue, or green, or red.", " Teal."]


@pytest.fixture(scope="module")
def attribute_server(attribute_export):
    with served(attribute_export, max_texts=2) as (url, _):  # 3 texts, or groups of 2 and 1: two requests
        yield url


def check(got: Rewards, want: list[list[float]]) -> None:
    assert isinstance(got, list) and len(got) == len(want)
    assert got == pytest.approx([w[0] for w in want], abs=1e-4)
    assert [list(a) for a in got.attributes] == [ATTRIBUTE_NAMES] * len(want)
    assert [a[n] for a in got.attributes for n in ATTRIBUTE_NAMES] == pytest.approx(
        [v for w in want for v in w[1:]], abs=1e-4
    )


def test_every_method_returns_the_attributes(attribute_server, attribute_export, tokenizer):
    want = [plain_outputs(attribute_export, tokenizer, PROMPT, r) for r in RESPONSES]
    with RewardClient(attribute_server) as c:
        check(c.score([PROMPT + r for r in RESPONSES]), want)
        two = c.score_groups([(PROMPT, RESPONSES[:2]), (PROMPT, RESPONSES[2:])])
        check(two[0], want[:2])
        check(two[1], want[2:])
        messages = c.score_messages([[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Red."}]])
        assert len(messages.attributes) == 1 and list(messages.attributes[0]) == ATTRIBUTE_NAMES

    async def run():
        async with AsyncRewardClient(attribute_server) as c:
            groups = [{"prompt": PROMPT, "responses": RESPONSES[:1]}, {"prompt": PROMPT, "responses": RESPONSES[1:]}]
            return await c.score([PROMPT + r for r in RESPONSES]), await c.score_groups(groups)

    flat, groups = asyncio.run(run())
    check(flat, want)
    check(groups[0], want[:1])
    check(groups[1], want[1:])


def test_a_one_output_model_gives_plain_lists(exported_tiny):
    with served(exported_tiny) as (url, _), RewardClient(url) as c:
        flat = c.score([PROMPT + r for r in RESPONSES])
        (group,) = c.score_groups([(PROMPT, RESPONSES)])
    assert flat.attributes is None and group.attributes is None
    assert flat == list(flat) and json.loads(json.dumps(flat)) == list(flat)
    assert group == pytest.approx(flat, abs=1e-5)
