"""Input a careless or hostile client sends is its own mistake, answered in the API's error shape, never a server
fault: a lone surrogate or a 200,000-deep nesting on every route (400, no traceback), a body that stops arriving
(408 after --read-timeout), a Host that is not a loopback name on a loopback server (400: DNS rebinding); and
rm.client raises these as RewardRequestError, a client error."""

import asyncio
import logging

import pytest
from serving import asgi_post, client, scorer_for

ROUTES = ["/score", "/score_groups", "/get_reward"]
DEEP = b'{"texts": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
SURROGATE = {
    "/score": b'{"texts": ["fine", "\\ud800 a lone surrogate"]}',
    "/score_groups": b'{"groups": [{"prompt": "p", "responses": ["a", "b\\udfff"]}]}',
    "/get_reward": b'{"query": ["q"], "prompts": ["\\ud800"]}',
}
WHERE = {"/score": "texts[1]", "/score_groups": "groups[0].responses[1]", "/get_reward": "prompts[0]"}


@pytest.fixture(scope="module")
def scorer(exported_tiny):
    return scorer_for(str(exported_tiny))


@pytest.mark.parametrize("route", ROUTES)
def test_a_lone_surrogate_or_deep_nesting_is_a_400_on_every_route(scorer, route, caplog):
    with caplog.at_level(logging.ERROR, logger="rm.serve"), client(scorer) as c:
        headers = {"content-type": "application/json"}
        surrogate = c.post(route, content=SURROGATE[route], headers=headers)
        key = c.post(route, content=b'{"\\ud800": 1}', headers=headers)
        deep = c.post(route, content=DEEP, headers=headers)
        shallow_but_past_the_limit = c.post(route, content=b'{"texts": ' + b"[" * 40 + b"]" * 40 + b"}")
        assert c.app.state.batcher.rounds == []
    assert surrogate.status_code == 400, surrogate.text
    assert surrogate.json() == {
        "error": f"{WHERE[route]} holds a lone surrogate (\\u{'dfff' if 'groups' in route else 'd800'}), not text"
    }
    assert key.status_code == 400 and "a field name in the body holds a lone surrogate" in key.json()["error"]
    for got in (deep, shallow_but_past_the_limit):
        assert got.status_code == 400, got.text
        assert got.json() == {"error": "the JSON is nested deeper than 32 levels (this API's bodies need 5)"}
    assert not caplog.records  # nothing logged as a server fault


def test_a_body_that_stops_arriving_is_a_408_after_the_read_timeout(scorer):
    """The client sends part of a body and promises more that never comes: 408, not a request held for ever (the
    outer 60 s deadline only guards a hang)."""
    with client(scorer, read_timeout=0.2) as c:
        got = asyncio.run(asyncio.wait_for(asgi_post(c.app, "/score", b'{"texts": ["a', more=True), 60))
    assert got == (408, {"error": "the body did not arrive within this server's --read-timeout 0.2 s"})


def test_a_loopback_server_answers_loopback_host_names_only(scorer):
    """A page that rebinds its DNS name to 127.0.0.1 sends its own name as Host: refused on every route; loopback
    names (with or without a port) are answered, and --allow-host adds names."""
    with client(scorer) as c:
        for host in ("localhost", "localhost:8000", "127.0.0.1:8000", "127.1.2.3", "[::1]:8000", "LOCALHOST."):
            assert c.get("/health", headers={"host": host}).status_code == 200, host
        for host in ("attacker.example", "attacker.example:8000", "127.0.0.1.attacker.example", "10.0.0.1"):
            for method, path in (("GET", "/info"), ("GET", "/health"), ("POST", "/score")):
                got = c.request(method, path, headers={"host": host}, json={"texts": ["hi"]})
                assert got.status_code == 400, (host, path)
                assert got.json()["error"].startswith(f"Host {host} is not a name of this server")
    with client(scorer, allow_hosts=("rm.internal",)) as c:
        assert c.get("/info", headers={"host": "rm.internal:8000"}).status_code == 200
        assert c.get("/info", headers={"host": "attacker.example"}).status_code == 400
    with client(scorer, host="0.0.0.0") as c:  # reachable from other machines (which needs a key): any name
        assert c.get("/health", headers={"host": "rm-box.lan:8000"}).status_code == 200


def test_the_client_raises_refusals_as_client_errors():
    """A 4xx is a RewardRequestError (a RewardServerError too, so existing handlers still catch it); a lone
    surrogate is sent escaped so that the server's 400 names the item; a nesting JSON cannot encode is refused
    before sending."""
    import httpx

    from rm.client.calls import request_body
    from rm.client.server_error import RewardRequestError, RewardServerError, read_reply

    with pytest.raises(RewardRequestError) as refused:
        read_reply(httpx.Response(400, json={"error": "texts[0] holds a lone surrogate (\\ud800), not text"}))
    assert refused.value.status == 400 and isinstance(refused.value, RewardServerError)
    with pytest.raises(RewardServerError) as fault:
        read_reply(httpx.Response(500, json={"error": "internal error", "request_id": "ab"}))
    assert not isinstance(fault.value, RewardRequestError)
    assert request_body({"texts": ["\ud800"]}) == b'{"texts":["\\ud800"]}'
    assert request_body({"texts": ["é"]}) == '{"texts":["é"]}'.encode()  # UTF-8, not escaped, when it can be
    deep: list = []
    for _ in range(200_000):
        deep = [deep]
    with pytest.raises(RewardRequestError, match="nested too deeply"):
        request_body({"texts": deep})
