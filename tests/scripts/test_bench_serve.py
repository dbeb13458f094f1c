"""scripts/bench_serve.py's own arithmetic, without servers: the token ceiling worked out by hand, the request
bodies of each mode, and the load loop's rates (Little's law), error and loss counts against a fake server whose
latency is known. No timing of rm is checked: the numbers are the machine's."""

import asyncio
import json
import statistics
import sys

import httpx
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import bench_serve  # noqa: E402

REQUESTS = [
    {"prompt": "P1", "completions": ["a", "b"], "prompt_tokens": 10, "completion_tokens": [2, 4]},
    {"prompt": "P2", "completions": ["c", "d"], "prompt_tokens": 4, "completion_tokens": [1, 1]},
]


def test_ceiling_by_hand():
    # flat: (10+2) + (10+4) + (4+1) + (4+1) = 36 tokens; grouped: 10+2+4 + 4+1+1 = 22 tokens
    assert bench_serve.ceiling(REQUESTS) == (pytest.approx(36 / 22), 36, 22)


def test_bodies_hold_the_same_texts():
    flat = json.loads(bench_serve.body("rm-score", REQUESTS[0]))
    assert flat == {"texts": ["P1a", "P1b"]} == json.loads(bench_serve.body("baseline", REQUESTS[0]))
    assert json.loads(bench_serve.body("rm-groups", REQUESTS[0])) == {
        "groups": [{"prompt": "P1", "responses": ["a", "b"]}]
    }


def fake_server(latency: float, wrong_every: int = 0):
    """Answers /score after `latency` seconds, one reward per text (every `wrong_every`-th reply one short)."""
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        call = calls
        await asyncio.sleep(latency)
        n = len(json.loads(request.content)["texts"])
        if wrong_every and call % wrong_every == 0:
            n -= 1
        return httpx.Response(200, json={"rewards": [0.5] * n})

    return httpx.MockTransport(handler)


def run(transport, clients=4, seconds=0.6):
    return asyncio.run(
        bench_serve.load("http://fake", "rm-score", REQUESTS, clients, seconds, 0.0, 10_000, 0, 5.0, transport)
    )


def test_against_modes_send_what_their_counterparts_send_and_are_reported_against_them(capsys):
    for then, now in bench_serve.THEN.items():
        assert bench_serve.ROUTES[then] == bench_serve.ROUTES[now]
        assert bench_serve.body(then, REQUESTS[0]) == bench_serve.body(now, REQUESTS[0])

    def turn(rate: float) -> dict:
        keys = ("requests_per_s", "counted_responses_per_s", "busy", "tokens_per_response")
        return {"responses_per_s": rate, "latencies": [1.0], "errors": 0, "lost": 0, "sent": 1} | dict.fromkeys(
            keys, 1.0
        )

    rates = {"rm-score": 150, "rm-groups": 160, "baseline": 70, "rm-score-then": 100, "rm-groups-then": 160}
    results = {mode: [turn(rate), turn(rate + 2), turn(rate - 2)] for mode, rate in rates.items()}
    bench_serve.report(results, dict.fromkeys(rates, 1.0), 2.0)
    out = capsys.readouterr().out
    assert "(a) rm serve /score over the same at --against: 1.500x" in out
    assert "(b) rm serve /score_groups over the same at --against: 1.000x" in out
    assert "| (a) at --against | 1.00 | 100.0 |" in out


def test_load_rates_follow_the_latency():
    """Little's law on the latencies the load measured, not a throughput: a busy machine stretches the latencies
    (never below the server's 50 ms) and the rate with them, by the same formula."""
    out = run(fake_server(0.05))
    # 4 clients, each always waiting on one request: 4 / (mean latency) requests/s, 2 responses each
    assert min(out["latencies"]) >= 0.05
    assert out["requests_per_s"] == pytest.approx(4 / statistics.fmean(out["latencies"]))
    assert out["responses_per_s"] == pytest.approx(2 * out["requests_per_s"])
    assert (out["errors"], out["lost"]) == (0, 0) and out["sent"] > 2 * 4


def test_load_counts_wrong_replies_as_errors():
    out = run(fake_server(0.02, wrong_every=3))
    assert out["errors"] == out["sent"] // 3 and out["lost"] == 0
    assert out["first_error"] == 'HTTP 200: {"rewards":[0.5]}'  # one reward for two texts
    # A wrong reply occupies its client but is no answer: the rate counts the answered two thirds (their latencies
    # and the wrong ones' alike, 20 ms plus the machine's delays; 25% covers the difference of their means).
    answered = out["requests_per_s"] * statistics.fmean(out["latencies"]) / 4
    assert answered == pytest.approx(2 / 3, rel=0.25)


def test_the_request_pool_is_what_fits_whole_with_the_exported_tokenizers_counts(tmp_path):
    """10 HH pairs; request i is pair i's prompt with the answers of pairs i..i+3 (mod 10). Pair 9's rejected
    answer runs past 512 tokens (requests 6 to 9 hold it), pair 2's chosen answer holds a later turn (requests 9, 0,
    1 and 2 hold it) and pair 4's prompt alone runs past 512 tokens: only requests 3 and 5 are kept. The reference
    for the token counts is the exported tokenizer on each text."""
    from transformers import AutoTokenizer

    records = []
    for i in range(10):
        prompt = f"\n\nHuman: question {i} about apples{f' red{i}' * 600 if i == 4 else ''}?\n\nAssistant:"
        chosen = f" kind {i}" + ("\n\nHuman: more?\n\nAssistant: yes" if i == 2 else "")
        rejected = f" a rude reply number {i}" + (f" very{i}" * 700 if i == 9 else "")
        records.append({"chosen": prompt + chosen, "rejected": prompt + rejected})
    data = tmp_path / "hh.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    pool = bench_serve.prepare(data, tmp_path / "small", "small", 0)
    tok = AutoTokenizer.from_pretrained(tmp_path / "small" / "export")

    def n(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    assert pool["pairs"] == 10 and [r["prompt"] for r in pool["requests"]] == [
        f"\n\nHuman: question {i} about apples?\n\nAssistant:" for i in (3, 5)
    ]
    for r in pool["requests"]:
        assert len(r["completions"]) == bench_serve.GROUP and r["prompt_tokens"] == n(r["prompt"])
        assert r["completion_tokens"] == [n(c) for c in r["completions"]]
        assert r["prompt_tokens"] + max(r["completion_tokens"]) <= bench_serve.MAX_LENGTH
    assert json.loads((tmp_path / "small" / "requests.json").read_text()) == pool  # read back on the next run
