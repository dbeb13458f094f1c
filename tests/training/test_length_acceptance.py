"""Length cannot buy the length head's reward: on pairs that a marker decides while length goes along with it in 80%
of the training pairs (rm/data/length_pairs.py), plain Bradley-Terry buys accuracy with length first; the exported
quality output of a run with `model.head.length` must instead rank by the marker. Both runs: the same model, data,
steps and seed; each export is evaluated as a user would (`rm.load(...).evaluate`, what `rm eval` writes) on the
length-inverted test (the chosen answer shorter in every pair: only the marker wins), the length-balanced test, and
a held-out set drawn like the training set (80% longer chosen).

The reward's correlation with length is read on the balanced set (also the runs' eval split, so eval.json's
token-count correlation is over it too), not on the 80% held-out set: there the better answer is the longer in 80%
of the pairs, so a reward that ranks by the marker alone correlates with length (about +0.57) by construction. Both
are printed.

Measured at these settings (plain BT / length head): seed 0, inverted 0.395 / 0.690, balanced 0.750 / 0.770,
pearson(reward, chars) +0.407 / +0.064; seed 1, 0.380 / 0.720, 0.690 / 0.800, +0.408 / +0.075; seed 2, 0.270 /
0.790, 0.550 / 0.735, +0.667 / -0.104 (one bound missed by 0.004). Plain BT learns the markers later: at 300 steps
it still ranks by length on the inverted pairs.
"""

import math

import pytest

import rm
from conftest import QUICKSTART
from rm.data.length_pairs import pairs, write_length_dataset
from rm.data.synthetic import write_jsonl_gz

SEED, N_TRAIN, N_TEST, STEPS = 0, 2000, 200, 300
SETTING = [
    "model.random_init.hidden_size=64",
    "model.random_init.intermediate_size=128",
    "model.random_init.num_hidden_layers=2",
    "tokenizer.vocab_size=300",
    "train.batch_size=16",
    "train.lr=3e-3",
    f"train.max_steps={STEPS}",
    "train.eval_steps=0",
    "train.report_to=[]",
    "train.num_threads=1",
    f"train.seed={SEED}",
]
MAX_ABS_PEARSON = 0.1


def se(p: float, n: int) -> float:
    """One standard error of an accuracy p measured on n pairs."""
    return math.sqrt(max(p * (1 - p), 0.25 / n) / n)


@pytest.mark.slow
def test_the_length_heads_reward_ranks_by_the_marker_where_plain_bradley_terry_ranks_by_length(tmp_path):
    write_length_dataset(tmp_path, N_TRAIN, N_TEST, SEED)  # train: 80% longer chosen; test: inverted; balanced
    write_jsonl_gz(tmp_path / "marker" / "heldout.jsonl.gz", pairs(N_TEST, SEED + 3, 0.8))
    write_jsonl_gz(tmp_path / "marker" / "balanced.jsonl.gz", pairs(N_TEST, SEED + 2, 0.5))  # the eval split
    sets = {"inverted": ("marker", "test"), "balanced": ("balanced", "test"), "heldout": ("marker", "heldout")}
    got, runs = {}, {}
    for name, extra in (("plain", []), ("head", ["model.head.length=true"])):
        data = [f"data.source={tmp_path / 'marker'}", "data.eval_split=balanced"]
        run = rm.train(QUICKSTART, overrides=[f"output_dir={tmp_path / name}", *data, *SETTING, *extra])
        model = rm.load(run.export, device="cpu", num_threads=1)
        got[name] = {s: model.evaluate(str(tmp_path / d), split=split)["overall"] for s, (d, split) in sets.items()}
        runs[name] = run.metrics
    acc = {m: {s: got[m][s]["accuracy"] for s in sets} for m in got}
    # |Pearson(reward, length in characters)| over every balanced response: eval.json's own control, the same
    # computation for both models
    r = {m: got[m]["balanced"]["reward_length_pearson"] for m in got}
    r80 = {m: got[m]["heldout"]["reward_length_pearson"] for m in got}
    tokens_r = runs["head"]["length_head"]["quality_pearson"]  # the same, by the token count the model saw
    line = (
        f"plain BT: inverted {acc['plain']['inverted']:.3f}, balanced {acc['plain']['balanced']:.3f}, "
        f"pearson(reward, chars) {r['plain']:+.3f}; length head: inverted {acc['head']['inverted']:.3f}, balanced "
        f"{acc['head']['balanced']:.3f}, pearson(reward, chars) {r['head']:+.3f}, (reward, tokens) {tokens_r:+.3f}; "
        f"on the 80% held-out set: plain {r80['plain']:+.3f}, head {r80['head']:+.3f}"
    )
    print(line)
    assert acc["plain"]["inverted"] < 1.0, f"plain BT learnt the marker whole: choose fewer steps ({line})"
    assert acc["head"]["inverted"] >= acc["plain"]["inverted"] + 0.10, line
    assert abs(r["head"]) <= MAX_ABS_PEARSON and abs(tokens_r) <= MAX_ABS_PEARSON, line
    # Not worse on balanced pairs, within one standard error of the difference of two accuracies on N_TEST pairs
    tolerance = math.hypot(se(acc["head"]["balanced"], N_TEST), se(acc["plain"]["balanced"], N_TEST))
    assert acc["head"]["balanced"] >= acc["plain"]["balanced"] - tolerance, line
    # and learnt something: 3 standard errors of a coin above chance (0.606 at 200 pairs)
    assert acc["head"]["balanced"] >= 0.5 + 3 * se(0.5, N_TEST), line
