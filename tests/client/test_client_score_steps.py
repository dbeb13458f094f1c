"""`RewardClient.score_steps` and its async twin against a live `python -m rm serve` of a process reward export:
the numbers `rm.load(...).score_steps` gives (1e-6) in the caller's shapes, also when a call is cut at the server's
--max-texts (a problem never split); a refused problem arrives as RewardRequestError with the server's line. The
cutting and the reply checks are tested offline too."""

import asyncio

import pytest
from live_rm_server import rm_serve
from scoring.prm_exports import ONE, PROBLEM, flat, prm_export

import rm
from rm.client import AsyncRewardClient, RewardClient, RewardRequestError, RewardServerError
from rm.client.calls import as_problems, sized_parts, step_scores, step_sizes

MAX_TEXTS = 3


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory):
    return prm_export(tokenizer, tmp_path_factory.mktemp("client-steps") / "prm")


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    log = tmp_path_factory.mktemp("client-steps-serve") / "serve.log"
    with rm_serve(folder, log, "--max-texts", str(MAX_TEXTS), "--max-wait-ms", "2") as url:
        yield url


def close(got, want) -> None:
    assert [x is None for x in flat(got)] == [x is None for x in flat(want)]
    assert [x for x in flat(got) if x is not None] == pytest.approx([x for x in flat(want) if x is not None], abs=1e-6)


@pytest.mark.slow
def test_score_steps_over_http_equals_the_api_across_requests(server, folder):
    api = rm.load(folder, device="cpu")
    problems = [PROBLEM, ONE, PROBLEM, {"prompt": "p", "solutions": []}, ONE]  # 7 solutions: 3 requests of <= 3
    want = api.score_steps(problems)
    with RewardClient(server, timeout=30) as c:
        assert c.info()["step_separator"] == api.scorer.step_separator
        close(c.score_steps(problems), want)
        close(c.score_steps(PROBLEM), want[0])
        assert c.score_steps([]) == []
        with pytest.raises(RewardRequestError) as e:
            c.score_steps([ONE, {"prompt": "p", "completions": ["a", ""]}])
        assert e.value.status == 422 and e.value.message == "items[1]: field 'completions[1]' is an empty step"

    async def both():
        async with AsyncRewardClient(server, timeout=30) as c:
            return await asyncio.gather(c.score_steps(problems), c.score_steps(ONE))

    many, one = asyncio.run(both())
    close(many, want)
    close(one, want[1])


def test_a_call_is_cut_at_the_limit_without_splitting_a_problem():
    one, problems = as_problems([PROBLEM, ONE, {"prompt": "p", "solutions": []}, PROBLEM, ONE])
    assert not one and step_sizes(problems) == [2, 1, 1, 2, 1]
    assert [len(p) for p in sized_parts(problems, step_sizes(problems), 3)] == [2, 2, 1]
    assert as_problems(ONE) == (True, [ONE])
    with pytest.raises(TypeError, match="problems\\[1\\] must be a dict"):
        as_problems([PROBLEM, {"prompt": "p"}])


def test_a_reply_of_the_wrong_shape_is_a_server_error():
    assert step_scores({"step_scores": [[[0.5, None], [0.1]], [0.2]]}, [PROBLEM, ONE]) == [[[0.5, None], [0.1]], [0.2]]
    for reply in ({"step_scores": [[0.5]]}, {"step_scores": [[["x"]], [0.2]]}, {"rewards": []}):
        with pytest.raises(RewardServerError, match="unexpected reply"):
            step_scores(reply, [PROBLEM, ONE])
