"""rm's suite aggregates against RewardBench's own functions, run in their own venv (`make references` builds
.venv/ref-rewardbench: rewardbench 0.1.4 with --no-deps, numpy, pandas), fed the same per-example rewards as JSON
(tests/suites/rewardbench_reference.py). Both the rewards the tiny export gives the fixtures and seeded rewards
with exact ties and varied margins (every branch of the Ties rule) must give the same numbers to 1e-9.

Locally the tests skip, saying why, when that venv is missing; under CI=true they fail instead."""

import json
import os
import subprocess
from typing import Any

import numpy as np
import pytest
from rewardbench_reference import load_defs
from suite_helpers import fixture_items, score

from conftest import REPO
from rm.data.formats.chat import Renderer
from rm.suites import rewardbench, rewardbench2
from rm.suites.records import SuiteItem

REF_VENV = REPO / ".venv" / "ref-rewardbench"
DRIVER = REPO / "tests" / "suites" / "rewardbench_reference.py"


def reference_python() -> str:
    python = REF_VENV / "bin" / "python"
    if not (REF_VENV / ".installed").is_file():
        why = f"RewardBench's reference venv {REF_VENV} is missing: build it with `make references`"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return str(python)


def reference(task: str, rows: list[dict] | None = None, batches: list[list[dict]] | None = None) -> Any:
    """The reference's answer for `rows`, or its answers for each of `batches` (one process for them all)."""
    request = {"task": task, "rows": rows} if batches is None else {"task": task, "batches": batches}
    proc = subprocess.run([reference_python(), str(DRIVER)], input=json.dumps(request), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def seeded_rewards(items: list[SuiteItem], seed: int) -> list[np.ndarray]:
    """Rewards on a coarse grid (so that ties happen), every third record's responses all equal."""
    rng = np.random.default_rng(seed)
    out = [rng.integers(-3, 4, len(i.responses)).astype(float) / 2 for i in items]
    return [np.zeros_like(r) if k % 3 == 0 else r for k, r in enumerate(out)]


def separated_rewards(items: list[SuiteItem], seed: int) -> list[np.ndarray]:
    """Correct answers mostly above the incorrect ones, by varied gaps and spreads: Ties' accurate, preferred and
    margin terms each both true and false somewhere."""
    rng = np.random.default_rng(seed)
    return [np.concatenate([1 + rng.uniform(0, 0.6, i.n_chosen), rng.uniform(-1, 1.3, len(i.responses) - i.n_chosen)])
            for i in items]  # fmt: skip


def edge_rewards(items: list[SuiteItem]) -> list[np.ndarray]:
    """The gap between correct and incorrect answers exactly equal to the spread among the correct ones (and, for
    one correct answer, a tie at the top): where > and >= part."""
    out = []
    for i in items:
        spread = 0.5 * (i.n_chosen - 1)
        wrong = np.array([1.0 - spread] + [-2.0] * (len(i.responses) - i.n_chosen - 1))
        out.append(np.concatenate([1.0 + 0.5 * np.arange(i.n_chosen)[::-1], wrong]))
    return out


def assert_rewardbench_matches(items: list[SuiteItem], rewards: list[np.ndarray]) -> None:
    rows = [
        {"subset": i.subset, "chosen": float(r[0]), "rejected": float(r[1])}
        for i, r in zip(items, rewards, strict=True)
    ]
    ref = reference("rewardbench", rows)
    block = rewardbench.suite_block(items, rewards)
    assert {n: m["accuracy"] for n, m in block["subsets"].items()} == pytest.approx(ref["subsets"], abs=1e-9)
    assert block["sections"] == pytest.approx(ref["sections"], abs=1e-9)
    assert block["score"] == pytest.approx(np.mean(list(ref["sections"].values())), abs=1e-9)
    # The weights rm writes down are the published ones, subset by subset and section by section.
    assert {s: dict(c) for s, c in rewardbench.SECTIONS.items()} == {
        s: {t: ref["example_counts"][t] for t in tests} for s, tests in ref["subset_mapping"].items()
    }


@pytest.mark.slow
def test_rewardbench_sections_equal_rewardbenchs_own(exported_tiny):
    run = score(exported_tiny, "rewardbench")
    items = fixture_items("rewardbench")
    assert run.result["suite"]["sections"] == rewardbench.suite_block(items, run.rewards)["sections"]
    assert_rewardbench_matches(items, run.rewards)
    assert_rewardbench_matches(items, seeded_rewards(items, 0))


@pytest.mark.slow
def test_rewardbench2_scores_equal_rewardbenchs_own(exported_tiny):
    items = fixture_items("rewardbench2")
    run = score(exported_tiny, "rewardbench2")
    drawn = [f(items, seed) for seed in range(4) for f in (seeded_rewards, separated_rewards)]
    sets = [run.rewards, edge_rewards(items), *drawn]
    batches = [[{"id": i.id, "subset": i.subset, "scores": r.tolist(), "num_correct": i.n_chosen}
                for i, r in zip(items, rewards, strict=True)] for rewards in sets]  # fmt: skip
    for rewards, answer in zip(sets, reference("rewardbench2", batches=batches), strict=True):
        want = answer["subsets"]
        block = rewardbench2.suite_block(items, rewards)
        assert block["sections"] == pytest.approx(want, abs=1e-9)
        assert block["score"] == pytest.approx(np.mean(list(want.values())), abs=1e-9)
    assert run.result["suite"]["sections"] == rewardbench2.suite_block(items, run.rewards)["sections"]


def test_texts_are_formatted_as_rewardbench_formats_them_for_a_sequence_classifier(tokenizer, tmp_path):
    """With a chat template that writes BOS itself: RewardBench's `prepare_dialogue_from_tokenizer` (read from
    the reference venv's installed file) gives the very text rm scores, BOS included once; and the ids rm scores
    are that text's, tokenized whole with a doubled BOS removed, as its pipeline does."""
    reference_python()
    utils = next(REF_VENV.glob("lib/python*/site-packages/rewardbench/utils.py"))
    ns: dict[str, Any] = load_defs(utils, {"prepare_dialogue_from_tokenizer"},
                                   {"Dict": dict, "Any": Any, "PreTrainedTokenizer": object})  # fmt: skip
    tokenizer.save_pretrained(tmp_path)
    tok = type(tokenizer).from_pretrained(tmp_path)
    tok.add_special_tokens({"bos_token": "<|bos|>"})
    tok._tokenizer.post_processor = __import__("tokenizers").processors.TemplateProcessing(
        single="<|bos|> $A", special_tokens=[("<|bos|>", tok.bos_token_id)]
    )
    tok.chat_template = (
        "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    from rm.evaluation.record_texts import ScoreText
    from rm.evaluation.score_file import encode_texts
    from rm.tokens.tokenizer import special_prefix

    assert special_prefix(tok) == [tok.bos_token_id]
    records = [
        json.loads(line) for line in (REPO / "tests" / "fixtures" / "rewardbench.jsonl").read_text().splitlines()
    ]
    for record in records[:8]:
        item = rewardbench.parse(record, "x", Renderer(tok))
        theirs = ns["prepare_dialogue_from_tokenizer"](dict(record), tok)
        for text, response in (
            (theirs["text_chosen"], item.responses[0]),
            (theirs["text_rejected"], item.responses[1]),
        ):
            assert tok.bos_token + item.prompt + response == text
            [seq] = encode_texts(
                tok, [ScoreText("reward", item.prompt, response, item.turn_starts)], 10_000, [tok.bos_token_id]
            )
            whole = tok(text)["input_ids"]
            whole = whole[1:] if whole[:2] == [tok.bos_token_id] * 2 else whole
            assert list(seq.prompt_ids) + list(seq.response_ids[0]) == whole
