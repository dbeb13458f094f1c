"""The client's own logic, without a server: regrouping TRL's flat lists by prompt, cutting calls at --max-texts,
checking replies, and reading the server's error bodies."""

import math

import httpx
import pytest

from rm.client.calls import as_groups, flat_parts, flat_rewards, group_parts, group_rewards
from rm.client.server_error import RewardServerError, read_reply
from rm.client.trl_rewards import group_by_prompt

CONVO_A = [{"role": "user", "content": "a"}]
CONVO_B = [{"role": "user", "content": "b"}]


def test_group_by_prompt_regroups_and_places():
    prompts = ["p", "q", "p", CONVO_A, "q", CONVO_A, CONVO_B, "p"]
    completions = list("abcdefgh")
    groups, places = group_by_prompt(prompts, completions)
    assert groups == [
        {"prompt": "p", "responses": ["a", "c", "h"]},
        {"prompt": "q", "responses": ["b", "e"]},
        {"prompt": CONVO_A, "responses": ["d", "f"]},
        {"prompt": CONVO_B, "responses": ["g"]},
    ]
    # every completion's place points back at itself
    assert [groups[g]["responses"][k] for g, k in places] == completions
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        group_by_prompt(["p", "q"], ["a"])


def test_parts_respect_the_limit_and_never_split_a_group():
    assert flat_parts(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5], [6]]
    groups = as_groups([("p", ["a"] * n) for n in (2, 2, 1, 4, 1)])
    parts = group_parts(groups, 4)
    assert [[len(g["responses"]) for g in part] for part in parts] == [[2, 2], [1], [4], [1]]
    assert [len(g["responses"]) for part in group_parts(groups[:1], 1) for g in part] == [2]  # alone, for the 413
    with pytest.raises(TypeError, match=r"groups\[0\] responses must be a list"):
        as_groups([("p", "a single string")])
    with pytest.raises(TypeError, match="exactly the keys"):
        as_groups([{"prompt": "p", "response": ["a"]}])


def test_replies_are_checked_against_what_was_sent():
    assert flat_rewards({"rewards": [1, -0.5, None]}, 3)[:2] == [1.0, -0.5]
    assert math.isnan(flat_rewards({"rewards": [1, -0.5, None]}, 3)[2])
    with pytest.raises(RewardServerError, match="should be 2 numbers, got 3 items"):
        flat_rewards({"rewards": [1, 2, 3]}, 2)
    assert group_rewards({"rewards": [[1], [2, 3]]}, [1, 2]) == [[1.0], [2.0, 3.0]]
    with pytest.raises(RewardServerError, match=r"'rewards\[1\]' should be 1 numbers"):
        group_rewards({"rewards": [[1], [2, 3]]}, [1, 1])


def test_error_bodies_become_one_exception():
    ok = httpx.Response(200, json={"rewards": [1.0]})
    assert read_reply(ok) == {"rewards": [1.0]}
    with pytest.raises(RewardServerError) as e:
        read_reply(httpx.Response(500, json={"error": "model failed", "request_id": "ab12"}))
    assert (e.value.status, e.value.message, e.value.request_id) == (500, "model failed", "ab12")
    assert "HTTP 500: model failed (request id ab12)" == str(e.value)
    with pytest.raises(RewardServerError) as e:  # a proxy's page: its first line, not the whole page
        read_reply(httpx.Response(502, text="<html>Bad Gateway</html>\n<body>...</body>"))
    assert (e.value.status, e.value.message) == (502, "<html>Bad Gateway</html>")
    with pytest.raises(RewardServerError, match="not a JSON object"):
        read_reply(httpx.Response(200, json=[1.0]))
