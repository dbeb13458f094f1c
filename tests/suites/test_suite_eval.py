"""`rm eval --suite` end to end on the tiny export: the rewards it scores against plain transformers, the suite's
numbers made from those by hand, a long text cut and counted, the swap, the batch size, pad = EOS, the CLI."""

import json

import numpy as np
import pytest
from suite_helpers import SOURCES, fixture_items, plain_rewards, score

from conftest import tiny_model
from rm.suites import rm_bench


@pytest.mark.slow
def test_rewardbench_suite_scores_every_pair_as_plain_transformers_does(exported_tiny):
    run = score(exported_tiny, "rewardbench")
    items = fixture_items("rewardbench")
    some = plain_rewards(exported_tiny, [i.prompt + r for i in items[::6] for r in i.responses])
    assert np.allclose(np.concatenate(run.rewards[::6]), some, atol=1e-5)
    # By hand: a pair is right when chosen > rejected; Chat weighs alpacaeval-easy 100, ..., mt-bench-med 40.
    right = {}
    for item, r in zip(items, run.rewards, strict=True):
        right.setdefault(item.subset, []).append(float(r[0] > r[1]))
    suite = run.result["suite"]
    assert {n: m["accuracy"] for n, m in suite["subsets"].items()} == pytest.approx(
        {n: np.mean(v) for n, v in right.items()}
    )
    chat = {"alpacaeval-easy": 100, "alpacaeval-length": 95, "alpacaeval-hard": 95, "mt-bench-easy": 28,
            "mt-bench-med": 40}  # fmt: skip
    by_hand = sum(np.mean(right[s]) * w for s, w in chat.items()) / sum(chat.values())
    assert suite["sections"]["Chat"] == pytest.approx(by_hand, abs=1e-12)
    assert suite["score"] == pytest.approx(np.mean(list(suite["sections"].values())), abs=1e-12)
    assert suite["subsets"]["math-prm"]["weight"] == 984 and suite["texts_truncated"] == 0
    # an rm export carries its HH chat template: RewardBench renders with it too
    assert suite["formatting"]["renderer"] == "tokenizer chat template" and suite["formatting"]["same_as_leaderboard"]
    assert run.result["overall"]["n"] == len(items) == 48


@pytest.mark.slow
def test_a_long_text_is_cut_and_counted_never_dropped(exported_tiny):
    """max_length 24: the prompts lose tokens and the long answers keep their ends; every pair is still scored."""
    from transformers import AutoTokenizer

    run = score(exported_tiny, "rewardbench", max_length=24)
    tok = AutoTokenizer.from_pretrained(exported_tiny)
    items = fixture_items("rewardbench")
    too_long = sum(len(tok(i.prompt + r)["input_ids"]) > 24 for i in items for r in dict.fromkeys(i.responses))
    assert run.result["suite"]["texts_truncated"] == too_long > 0
    assert run.result["overall"]["n"] == 48 and run.result["eval"]["pairs_dropped_too_long"] == 0
    assert np.isfinite(np.concatenate(run.rewards)).all()


@pytest.mark.slow
def test_swapping_chosen_and_rejected_gives_one_minus_accuracy(exported_tiny, tmp_path):
    rows = [json.loads(line) for line in SOURCES["rewardbench"].read_text().splitlines()]
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text(
        "".join(json.dumps({**r, "chosen": r["rejected"], "rejected": r["chosen"]}) + "\n" for r in rows)
    )
    plain, turned = score(exported_tiny, "rewardbench"), score(exported_tiny, "rewardbench", swapped)
    rewards = np.array(plain.rewards)
    assert (rewards[:, 0] != rewards[:, 1]).all()  # no tie, so every pair flips
    want = {n: 1 - m["accuracy"] for n, m in plain.result["suite"]["subsets"].items()}
    assert {n: m["accuracy"] for n, m in turned.result["suite"]["subsets"].items()} == pytest.approx(want)


@pytest.mark.slow
def test_scores_do_not_depend_on_the_batch_size(exported_tiny):
    """Batches of 1, of 4 (a prompt's six responses spread over two batches) and of 64 (all in one)."""
    runs = [score(exported_tiny, "rm-bench", batch_size=b) for b in (1, 4, 64)]
    for run in runs[1:]:
        assert np.abs(np.concatenate(run.rewards) - np.concatenate(runs[0].rewards)).max() < 1e-5
        assert run.result["suite"]["matrix"] == runs[0].result["suite"]["matrix"]
        assert run.result["suite"]["score"] == pytest.approx(runs[0].result["suite"]["score"], abs=1e-5)


@pytest.mark.slow
def test_pad_equal_to_eos_reads_each_texts_own_last_token(tokenizer, tmp_path):
    """A model whose pad token is its EOS, with a chat template ending every turn on EOS: each reward equals that
    conversation's own forward at its last token, whatever the padding of its batch."""
    from rm.config import RunConfig
    from rm.export.folder import Weights, export_model

    tokenizer.save_pretrained(tmp_path / "tok")
    tok = type(tokenizer).from_pretrained(tmp_path / "tok")
    tok.pad_token = tok.eos_token
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    model = tiny_model(tok, seed=3, pad_token_id=tok.eos_token_id)
    export = export_model(model, tok, tmp_path / "export", RunConfig(), Weights(None, None))
    run = score(export, "rm-bench", batch_size=5)
    items = fixture_items("rm-bench", tok)
    texts = [i.prompt + r for i in items for r in i.responses]
    assert all(tok(t)["input_ids"][-1] == tok.eos_token_id == tok.pad_token_id for t in texts)
    want = plain_rewards(export, texts)
    assert np.abs(np.concatenate(run.rewards) - want).max() < 1e-5
    assert run.result["suite"]["formatting"]["renderer"] == "tokenizer chat template"
    by_hand = rm_bench.style_matrix([want[k : k + 6] for k in range(0, len(want), 6)])
    assert np.allclose(run.result["suite"]["matrix"]["domains"]["all"], by_hand)


def test_cli_refuses_options_that_reshape_a_suite():
    from rm.cli import build_parser
    from rm.cli.evaluate import suite_data
    from rm.errors import ConfigError

    args = build_parser().parse_args(
        ["eval", "--model", "m", "--suite", "rm-bench", "--holdout", "0.2", "--max-pairs", "9"]
    )
    with pytest.raises(ConfigError, match="--holdout, --max-pairs cannot be used with --suite"):
        suite_data(args)
    args = build_parser().parse_args(["eval", "--model", "m", "--suite", "rm-bench", "--prior-sets", "x"])
    with pytest.raises(ConfigError, match="--prior-sets goes with --suite rewardbench only"):
        suite_data(args)
    args = build_parser().parse_args(["eval", "--model", "m", "--suite", "rewardbench", "--subsets", "a,b"])
    assert suite_data(args).subsets == ["a", "b"] and suite_data(args).source == ""


@pytest.mark.slow
def test_prior_sets_are_a_fifth_figure_outside_the_score(exported_tiny, tmp_path):
    """A folder laid out as allenai/preference-test-sets (one split per subset, prompts as message lists):
    Prior Sets is the plain mean of the four subsets' accuracies, and the four sections and the score are
    those of the run without them."""
    from rm.evaluation.eval_report import EvalOptions
    from rm.suites.suite_eval import SuiteData, score_suite

    rows = [json.loads(line) for line in SOURCES["rewardbench"].read_text().splitlines()]
    folder = tmp_path / "prefs"
    folder.mkdir()
    for k, name in enumerate(("anthropic_helpful", "anthropic_hhh", "shp", "summarize", "mtbench_human")):
        picked = rows[3 * k : 3 * k + 3]
        lines = [{**r, "prompt": [{"role": "user", "content": r["prompt"]}]} for r in picked]
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    data = SuiteData(source=str(SOURCES["rewardbench"]), prior_sets=str(folder))
    run = score_suite(str(exported_tiny), "rewardbench", data, EvalOptions(samples=10))
    alone = score(exported_tiny, "rewardbench").result["suite"]
    suite = run.result["suite"]
    prior = {n: m["accuracy"] for n, m in suite["subsets"].items() if m["section"] == "Prior Sets"}
    assert set(prior) == {"anthropic_helpful", "anthropic_hhh", "shp", "summarize"}  # mtbench_human is not read
    assert suite["prior_sets"] == pytest.approx(np.mean(list(prior.values())))
    assert suite["sections"] == alone["sections"] and suite["score"] == alone["score"]
