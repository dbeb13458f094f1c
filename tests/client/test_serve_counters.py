"""The server's counters (`Batcher.counters()`, what GET /info reports): requests, groups and prompt tokens computed,
against token counts of the tokenizer's own: in the shared layout a group's prompt, and the prompt that the texts of
one /score request share, count once (so they do on a prompt's cache); in the padded layout a prompt counts once
per response."""

import dataclasses

import pytest
from serve.serving import client, padded, scorer_for

from rm.tokens.tokenizer import special_prefix

P1 = "\n\nHuman: Name a colour.\n\nAssistant:"
P2 = "\n\nHuman: Name a fruit, please, and say why.\n\nAssistant:"
KEYS = {"busy_seconds", "scored", "tokens", "requests", "groups", "prompt_tokens"}


def prompt_tokens(tokenizer, prompt: str) -> int:
    return len(special_prefix(tokenizer) + tokenizer(prompt, add_special_tokens=False)["input_ids"])


def delta(c, method: str, path: str, body: dict) -> dict:
    """The counters' change over one request (answered 200)."""
    before = c.app.state.batcher.counters()
    assert c.request(method, path, json=body).status_code == 200
    after = c.app.state.batcher.counters()
    return {k: after[k] - before[k] for k in ("requests", "groups", "prompt_tokens", "scored")}


@pytest.mark.parametrize("layout", ["shared", "padded"])
def test_requests_groups_and_prompt_tokens(exported_tiny, tokenizer, layout):
    scorer = scorer_for(str(exported_tiny))
    if layout == "padded":  # without the prefix cache too, which scores a group's responses on its prompt once
        scorer = dataclasses.replace(padded(scorer), groups=None)
    t1, t2 = prompt_tokens(tokenizer, P1), prompt_tokens(tokenizer, P2)
    groups = {
        "groups": [
            {"prompt": P1, "responses": [" Red.", " Blue.", " Teal."]},
            {"prompt": P2, "responses": [" A pear.", " Figs."]},
        ]
    }
    shared_texts = {"texts": [P1 + " Red.", P1 + " A longer answer.", P1 + " Teal."]}
    own_texts = {"texts": [P1 + " Red.", P2 + " Figs."]}
    with client(scorer) as c:
        assert set(c.app.state.batcher.counters()) == KEYS
        once = layout == "shared"
        assert delta(c, "POST", "/score_groups", groups) == {
            "requests": 1, "groups": 2, "prompt_tokens": t1 + t2 if once else 3 * t1 + 2 * t2, "scored": 5
        }  # fmt: skip
        assert delta(c, "POST", "/score", shared_texts) == {
            "requests": 1, "groups": 1, "prompt_tokens": t1 if once else 3 * t1, "scored": 3
        }  # fmt: skip
        assert delta(c, "POST", "/score", own_texts) == {
            "requests": 1,
            "groups": 2,
            "prompt_tokens": t1 + t2,
            "scored": 2,
        }
        assert delta(c, "POST", "/score", {"texts": []}) == {
            "requests": 0,
            "groups": 0,
            "prompt_tokens": 0,
            "scored": 0,
        }


def test_info_reports_the_counters(exported_tiny):
    """GET /info carries every counter of `Batcher.counters()` under its key (the route adds them as they are)."""
    with client(scorer_for(str(exported_tiny))) as c:
        c.post("/score", json={"texts": [P1 + " Red."]})
        info = c.get("/info").json()
        want = c.app.state.batcher.counters()
    assert {k: info.get(k) for k in KEYS} == want
