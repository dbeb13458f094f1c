"""A model with attribute outputs served: every route's rewards are output 0, `attributes` gives the
named outputs 1.. per text, parallel to `rewards`, equal to plain transformers' logits of the same tokens; groups
on a cached prompt give the same."""

import pytest
from serving import client, scorer_for

from conftest import ATTRIBUTE_NAMES, plain_outputs

PROMPT = "\n\nHuman: Name a colour.\n\nAssistant:"
RESPONSES = [" Red.", " Blue, or green, or red.", " Teal."]


def test_every_route_gives_the_reward_and_the_named_attributes(attribute_export, tokenizer):
    scorer = scorer_for(str(attribute_export))
    assert scorer.attributes == ATTRIBUTE_NAMES and scorer.group_layout_name == "prefix-cache"
    want = [plain_outputs(attribute_export, tokenizer, PROMPT, r) for r in RESPONSES]
    with client(scorer) as c:
        info = c.get("/info").json()
        flat = c.post("/score", json={"texts": [PROMPT + r for r in RESPONSES]}).json()
        groups = c.post("/score_groups", json={"groups": [{"prompt": PROMPT, "responses": RESPONSES}]}).json()
        openrlhf = c.post("/get_reward", json={"query": [PROMPT + r for r in RESPONSES]}).json()
    assert info["attributes"] == ATTRIBUTE_NAMES
    for body in (flat, {k: v[0] for k, v in groups.items()}):
        assert body["rewards"] == pytest.approx([w[0] for w in want], abs=1e-4)
        assert [list(a) for a in body["attributes"]] == [ATTRIBUTE_NAMES] * 3
        got = [a[n] for a in body["attributes"] for n in ATTRIBUTE_NAMES]
        assert got == pytest.approx([v for w in want for v in w[1:]], abs=1e-4)
    assert openrlhf["rewards"] == pytest.approx([w[0] for w in want], abs=1e-4) and "attributes" not in openrlhf


def test_a_one_output_model_answers_without_attributes(exported_tiny):
    with client(scorer_for(str(exported_tiny))) as c:
        body = c.post("/score", json={"texts": ["a", "b"]}).json()
    assert set(body) == {"rewards", "truncated"}
