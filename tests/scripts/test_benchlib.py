"""The benchmarks' clock: a mode's rate counts only the time it actually ran, across paused turns."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import benchlib  # noqa: E402


def test_rates_count_only_running_time_even_when_steps_straddle_turns(tmp_path):
    """Turns of 5 s with 5 s pauses; steps of 3 s running time and 6 pairs: 2 pairs/s exactly."""
    turns = [(0.0, 5.0), (10.0, 15.0), (20.0, 25.0), (30.0, 35.0)]

    def wall(run):  # running time -> wall-clock time
        for a, b in turns:
            if run <= b - a:
                return a + run
            run -= b - a
        raise AssertionError

    rows = [{"t": wall(3 * i), "pairs": 6 * i, "tokens": 60 * i, "slots": 100 * i, "loss": 0.5} for i in range(1, 7)]
    rows.append({"done": True, "accuracy": 0.75})
    path = tmp_path / "m.progress"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = benchlib.rates(path, turns)
    assert r["pairs_per_s"] == pytest.approx(2.0)
    assert r["tokens_per_s"] == pytest.approx(20.0) and r["slots_per_s"] == pytest.approx(100 / 3)
    assert r["overall_pairs_per_s"] == pytest.approx(2.0)
    assert r["accuracy"] == 0.75 and r["turns"] == 3


def test_useful_flops_count_the_prompt_once():
    """One pair, prompt 2, chosen 1, rejected 1 tokens, N = 10 parameters, 1 layer of width 4.
    matmuls: 2 * 10 * 4 tokens = 80; attention context: prompt 1 + 2, chosen 2 + 1, rejected 2 + 1 = 9
    keys, times 4 * 4 * 1 = 144; forward 224, with backward 672."""
    pair = {"prompt": [1, 2], "chosen": [3], "rejected": [4]}
    assert benchlib.useful_flops([pair], 10, 1, 4, backward=False) == 224
    assert benchlib.useful_flops([pair], 10, 1, 4, backward=True) == 672


def test_computed_flops_count_padding_and_every_query_key_product():
    """Two rows of width 3 (6 slots, 18 query-key products), N = 10 parameters, 1 layer of width 4:
    matmuls 2 * 10 * 6 = 120, attention 4 * 4 * 18 = 288, times 3 with the backward pass: 1,224."""
    assert benchlib.computed_flops(6, 18, 10, 1, 4) == 1224


def test_progress_keeps_running_totals_of_scores(tmp_path):
    p = benchlib.Progress(tmp_path / "m.progress")
    p.step(8, 100, 120, 0.5, scores=1800)
    p.step(8, 90, 120, 0.4, scores=1800)
    p.finish(accuracy=0.5)
    rows = [json.loads(line) for line in (tmp_path / "m.progress").read_text().splitlines()]
    assert [r["scores"] for r in rows[:2]] == [1800, 3600] and rows[1]["slots"] == 240


def test_a_mode_ahead_of_the_others_waits_for_them():
    """1,000 pairs each. b is furthest behind (10%); a (10.5%) is within 1% of it and runs too; c (40%),
    a fast mode three turns ahead, skips the round. Before anyone has done anything every mode runs."""
    assert benchlib.due({"a": 105, "b": 100, "c": 400}, 1000) == ["a", "b"]
    assert benchlib.due({"a": 0, "b": 0, "c": 0}, 1000) == ["a", "b", "c"]
    # At the end, modes that finished their pairs (and are evaluating) all run again.
    assert benchlib.due({"a": 992, "b": 992, "c": 992}, 1000) == ["a", "b", "c"]


def test_work_rate_removes_which_pairs_a_turn_drew(tmp_path):
    """Every second of running does 100 units of work, but turns draw pairs of 10 or 50 units each, so raw
    pairs/s is 10 in some turns and 2 in others; in work units every turn runs at the same speed, and
    converted with the whole run's pairs per unit (34 pairs / 500 units) that is 6.8 pairs/s in every turn."""
    turns = [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0), (6.0, 7.0), (8.0, 9.0)]
    rows, pairs, slots = [], 0, 0
    for (_, end), per_pair in zip(turns, [10, 10, 50, 50, 10], strict=True):
        pairs += 100 // per_pair
        slots += 100
        rows.append({"t": end, "pairs": pairs, "tokens": 0, "slots": slots, "scores": 0})
    path = tmp_path / "m.progress"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = benchlib.rates(path, turns, work=lambda d: d["slots"])
    assert (r["pairs_per_s_min"], r["pairs_per_s_max"]) == (2.0, 10.0)  # the data, not the machine
    total = rows[-1]["pairs"] / rows[-1]["slots"] * 100  # pairs a second at 100 units a second
    assert r["work_pairs_per_s"] == pytest.approx(total)
    assert r["work_pairs_per_s_min"] == pytest.approx(total) and r["work_pairs_per_s_max"] == pytest.approx(total)
    assert r["overall_pairs_per_s"] == pytest.approx(rows[-1]["pairs"] / 5)


@pytest.mark.slow
def test_a_terminated_conductor_leaves_no_worker_behind(tmp_path):
    """`kill` (or a scheduler's time limit) sends SIGTERM, which ends Python without running `finally`:
    the conductor must still kill its workers, or a paused one holds its memory until someone finds it."""
    pid_file = tmp_path / "worker.pid"
    worker = f"""
        import os, sys, time
        sys.path.insert(0, {str(REPO / "scripts")!r})
        import benchlib
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        benchlib.pause_until_conducted()
        time.sleep(600)
    """
    conductor = f"""
        import sys
        sys.path.insert(0, {str(REPO / "scripts")!r})
        import benchlib
        from pathlib import Path
        benchlib.conduct({{"w": [sys.executable, "-c", {textwrap.dedent(worker)!r}]}}, Path({str(tmp_path)!r}), 0.5)
    """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(conductor)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # guards a hang only: two interpreters importing torch, seconds unloaded
        while not (pid_file.exists() and pid_file.read_text() and benchlib._state(int(pid_file.read_text())) == "T"):
            assert time.monotonic() < deadline and proc.poll() is None, "the worker was never set up"
            time.sleep(0.1)
        worker_pid = int(pid_file.read_text())
        time.sleep(1.0)  # into the turns: the worker has been continued, or the matmul peak is being measured
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 1
        assert err.strip().splitlines() == ["benchmark terminated (SIGTERM); its workers were killed"]
        with pytest.raises(ProcessLookupError):
            os.kill(worker_pid, 0)
    finally:  # a failing run of this test must not leave its own stopped processes behind either
        proc.kill()
        proc.wait()
        if pid_file.exists() and pid_file.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_bench_pairs_keep_exactly_the_pairs_that_fit_whole(tmp_path):
    """Every mode must see the same pairs, so a pair rm would change to fit (a long prompt cut at its turns)
    is left out like one TRL drops. The reference is the length arithmetic: the prompt and the longer response
    within max_length (this tokenizer puts nothing in front), with the ids the saved tokenizer gives each text."""
    from transformers import AutoTokenizer

    turn = "\n\nHuman: question {} about apples?\n\nAssistant: an answer about pears."
    records = [
        {
            "prompt": "".join(turn.format(k) for k in range(1 + i % 4 * 3)) + f"\n\nHuman: and {i}?\n\nAssistant:",
            "chosen": f" yes {i}",
            "rejected": " no" + " really" * (i % 3 * 20),
        }
        for i in range(12)
    ]
    data = tmp_path / "hh.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))

    bench = benchlib.bench_pairs(data, tmp_path / "work", n_eval=3, max_length=80, vocab=300, seed=0, limit=0)
    tok = AutoTokenizer.from_pretrained(bench.tokenizer_dir)
    written = bench.data_dir / "harmless-base"
    kept = [json.loads(line) for s in ("train", "test") for line in (written / f"{s}.jsonl").read_text().splitlines()]
    assert len(bench.train) + len(bench.eval) == len(kept)
    assert tok("a")["input_ids"] == tok.encode("a", add_special_tokens=False)  # nothing in front of a text
    for record in records:
        ids = {k: tok(record[k], add_special_tokens=False)["input_ids"] for k in ("prompt", "chosen", "rejected")}
        fits = len(ids["prompt"]) + max(len(ids["chosen"]), len(ids["rejected"])) <= 80
        assert (record in kept) == fits
        if fits:
            assert (bench.train + bench.eval)[kept.index(record)] == ids
    assert bench.dropped == len(records) - len(kept) and 0 < len(kept) < len(records)


def test_prepare_keeps_an_item_only_where_rms_fitting_leaves_it_whole(tmp_path):
    """The reference is the length arithmetic on a BPE trained apart on the same texts: an item is kept with the ids
    its texts give exactly when its prompt and longest response fit max_length (this tokenizer puts nothing in
    front). max_length is the length of one pair, so that pair fits at the limit; a multi-turn prompt rm would cut,
    a pair a token longer and a group whose long response rm would drop (keeping the other two) are all left out."""
    from rm.data.formats.group import Group
    from rm.data.formats.pair import Pair
    from rm.tokens.prepare import bpe_texts
    from rm.tokens.tokenizer import train_bpe

    turn = "\n\nHuman: question {} about apples?\n\nAssistant: an answer about pears."
    pairs = [
        Pair(turn.format(1) + "\n\nHuman: and one?\n\nAssistant:", " yes one", " no one", "s"),  # at the limit
        Pair(turn.format(2) + "\n\nHuman: and two?\n\nAssistant:", " yes two", " no two pears", "s"),
        Pair("".join(turn.format(k) for k in range(9)) + "\n\nHuman: and three?\n\nAssistant:", " yes", " no", "s"),
        Pair("\n\nHuman: short?\n\nAssistant:", " yes", " no", "s"),
    ]
    groups = [
        Group("\n\nHuman: pick?\n\nAssistant:", (" a", " b", " c" + " more" * 40), (0, 1, 2), "s"),
        Group("\n\nHuman: pick again?\n\nAssistant:", (" a", " b", " c"), (0, 1, 2), "s"),
    ]
    reference = train_bpe(bpe_texts(pairs + groups, 0, 0), 400)

    def ids(text: str) -> list[int]:
        return reference(text, add_special_tokens=False)["input_ids"]

    def length(item) -> int:
        texts = (item.chosen, item.rejected) if isinstance(item, Pair) else item.responses
        return len(ids(item.prompt)) + max(len(ids(t)) for t in texts)

    limit = length(pairs[0])
    assert length(pairs[1]) == limit + 1 and length(pairs[2]) > limit > length(pairs[3])  # the cases are as named
    assert length(groups[0]) > limit > length(groups[1])

    got = benchlib.prepare(pairs + groups, {"pairs": pairs, "groups": groups}, tmp_path, 400, limit)
    assert reference("a")["input_ids"] == reference.encode("a", add_special_tokens=False)  # nothing in front
    assert got.tokenizer.get_vocab() == reference.get_vocab()
    assert (tmp_path / "tokenizer" / "tokenizer.json").is_file() and got.tokenizer_dir == tmp_path / "tokenizer"
    whole = {"prompt": ids(pairs[0].prompt), "responses": [ids(pairs[0].chosen), ids(pairs[0].rejected)]}
    short = {"prompt": ids(pairs[3].prompt), "responses": [ids(" yes"), ids(" no")]}
    assert got.fitted["pairs"] == [whole, None, None, short]
    again = {"prompt": ids(groups[1].prompt), "responses": [ids(" a"), ids(" b"), ids(" c")]}
    assert got.fitted["groups"] == [None, again]
    chosen, rejected = whole["responses"]
    assert benchlib.as_pair(whole) == {"prompt": whole["prompt"], "chosen": chosen, "rejected": rejected}
