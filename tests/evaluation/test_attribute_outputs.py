"""Models with attribute outputs in `rm score` and `rm eval`: loaded with output 0 the reward and
outputs 1.. named by id2label; `rm score` writes `reward` and `attributes` equal to plain transformers' logits of
the same tokens; `rm eval` adds eval.json's `attributes` block, equal to the metrics computed here from the
records' scores and a plain forward of each response."""

import json
import logging

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification

from conftest import ATTRIBUTE_NAMES, plain_outputs, tiny_model
from rm.cli import main as cli_main
from rm.data.data_report import DataReport
from rm.data.formats.chat import Renderer
from rm.evaluation.record_texts import texts_of
from rm.evaluation.report.markdown import format_table
from rm.model.pretrained import attribute_names, load_reward_model
from rm.tokens.tokenizer import special_prefix

NAMES = ATTRIBUTE_NAMES


def test_an_attribute_export_loads_with_its_names(attribute_export):
    model, _ = load_reward_model(str(attribute_export))
    assert attribute_names(model.hf.config) == NAMES
    out = model(input_ids=torch.tensor([[5, 6, 7], [8, 9, 0]]), attention_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]))
    assert out.shape == (2, 3) and out.dtype == torch.float32


def test_another_multi_output_classifier_reads_output_0_as_the_reward(tokenizer, tmp_path, caplog):
    hf = tiny_model(tokenizer)
    hf.config.num_labels = 2  # a classifier's head: labels LABEL_0, LABEL_1
    hf.score = torch.nn.Linear(hf.config.hidden_size, 2, bias=False)
    hf.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rm"):
        model, _ = load_reward_model(str(tmp_path))
    assert "rm reads output 0 as the reward" in caplog.text and "'LABEL_0'" in caplog.text
    assert attribute_names(model.hf.config) == ["LABEL_1"]


def test_rm_score_writes_reward_and_attributes_equal_to_plain_logits(attribute_export, tokenizer, tmp_path):
    records = [
        {"prompt": "What is 2 + 3?", "response": "5, I think."},
        {"prompt": "Say hi.", "chosen": "Hi there!", "rejected": "No."},
        {"prompt": "Name a colour.", "responses": [{"text": "Red."}, {"text": "Blue, or green, or red."}]},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out.jsonl"
    assert cli_main(["score", "--model", str(attribute_export), "--input", str(src), "--out", str(out)]) == 0
    single, pair, group = [json.loads(line) for line in out.read_text().splitlines()]
    texts = [
        # a row's prompt is the user's turn, as training's rows format renders it (rm/data/formats/text_rule.py)
        (single, "reward", "attributes", "\n\nHuman: What is 2 + 3?\n\nAssistant:", " 5, I think."),
        (pair, "chosen_reward", "chosen_attributes", "Say hi.", "Hi there!"),
        (pair, "rejected_reward", "rejected_attributes", "Say hi.", "No."),
    ]
    for record, reward_key, key, prompt, response in texts:
        want = plain_outputs(attribute_export, tokenizer, prompt, response)
        got = [record[reward_key]] + [record[key][n] for n in NAMES]
        assert list(record[key]) == NAMES
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    assert len(group["rewards"]) == len(group["attributes"]) == 2
    # A `responses` record's prompt is rendered as training renders it: the texts `rm score` reads from it.
    texts = texts_of(records[2], "in.jsonl:3", "", Renderer(tokenizer), DataReport("error"))
    assert [t.response.strip() for t in texts] == ["Red.", "Blue, or green, or red."]
    for k, text in enumerate(texts):
        want = plain_outputs(attribute_export, tokenizer, text.prompt, text.response)
        got = [group["rewards"][k]] + [group["attributes"][k][n] for n in NAMES]
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    assert len({round(v, 3) for v in want}) == 3  # three different outputs: a mixed-up column would show


def test_a_model_without_attributes_scores_exactly_as_before(exported_tiny, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n")
    assert cli_main(["score", "--model", str(exported_tiny), "--input", str(src), "--out", str(tmp_path / "o")]) == 0
    assert set(json.loads((tmp_path / "o").read_text())) == {"prompt", "chosen", "rejected"} | {
        "chosen_reward",
        "rejected_reward",
    }


def average_ranks_by_counting(x: np.ndarray) -> np.ndarray:
    """Average ranks another way: a value's rank is 1 + how many are below it + half of the others equal to it."""
    below = (x[:, None] > x[None, :]).sum(1)
    equal = (x[:, None] == x[None, :]).sum(1) - 1
    return 1 + below + equal / 2


def expected_numbers(pred: np.ndarray, true: np.ndarray) -> dict:
    used = ~np.isnan(true)
    p, t = pred[used], true[used]
    rho = np.corrcoef(average_ranks_by_counting(p), average_ranks_by_counting(t))[0, 1]
    return {"rmse": np.sqrt(np.mean((p - t) ** 2)), "pearson": np.corrcoef(p, t)[0, 1], "spearman": rho,
            "n": int(used.sum()), "missing": int((~used).sum())}  # fmt: skip


@pytest.mark.slow
def test_rm_eval_reports_each_attribute_against_plain_logits(attribute_export, tokenizer, tmp_path):
    from rm.config import DataConfig
    from rm.data.load import load_pairs
    from rm.evaluation.eval_report import EvalOptions, evaluate_model

    rng = np.random.default_rng(0)
    rows = []
    for i in range(16):
        scores = [{n: int(rng.integers(0, 5)) for n in NAMES} for _ in range(2)]
        if i % 5 == 0:
            scores[1]["verbosity"] = "N/A"  # a missing score: skipped and counted
        rows.append({"prompt": f"Question {i}: what is {i} + {i}?", "chosen": f"{2 * i}, of course.",
                     "rejected": f"{i}" + " hmm" * (i % 4), "subset": "ab"[i % 2],
                     "chosen_attributes": scores[0], "rejected_attributes": scores[1]})  # fmt: skip
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = DataConfig(source=str(src))
    result = evaluate_model(str(attribute_export), data, tmp_path / "eval", EvalOptions(batch_size=4, samples=10))

    # Every response's outputs from plain transformers, on the tokens training gives a pair (prompt, then response).
    model = AutoModelForSequenceClassification.from_pretrained(attribute_export).eval()
    pred, true, subset = [], [], []
    for pair, row in zip(load_pairs(str(src), "train", []), rows, strict=True):
        prompt = special_prefix(tokenizer) + tokenizer(pair.prompt, add_special_tokens=False)["input_ids"]
        for response, key in ((pair.chosen, "chosen_attributes"), (pair.rejected, "rejected_attributes")):
            ids = prompt + tokenizer(response, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                pred.append(model(input_ids=torch.tensor([ids])).logits[0, 1:].tolist())
            true.append([float("nan") if row[key][n] == "N/A" else row[key][n] for n in NAMES])
            subset.append(row["subset"])
    pred, true, subset = np.array(pred), np.array(true), np.array(subset)
    block = result["attributes"]
    assert list(block) == NAMES and set(block["verbosity"]["subsets"]) == {"a", "b"}
    for a, name in enumerate(NAMES):
        for where, mask in (("overall", np.ones(len(subset), bool)), ("a", subset == "a"), ("b", subset == "b")):
            got = block[name]["overall"] if where == "overall" else block[name]["subsets"][where]
            want = expected_numbers(pred[mask, a], true[mask, a])
            assert (got["n"], got["missing"]) == (want["n"], want["missing"])
            for key in ("rmse", "pearson", "spearman"):
                assert got[key] == pytest.approx(want[key], abs=1e-4), (name, where, key)
    assert block["verbosity"]["overall"]["missing"] == 4 and block["helpfulness"]["overall"]["missing"] == 0
    saved = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert saved["attributes"]["helpfulness"]["overall"]["n"] == 32 and "attributes.png" in saved["eval"]["plots"]
    assert (tmp_path / "eval" / "attributes.png").stat().st_size > 0
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "## Attributes" in report and "| verbosity | overall |" in report
    assert 'id="attributes"' in (tmp_path / "eval" / "report.html").read_text()
    assert format_table(result).splitlines()[-1].startswith("verbosity")  # the console summary's last line
    # rewards.jsonl: each response's attribute outputs, the plain logits 1.. of its tokens (chosen, then rejected).
    lines = [json.loads(line) for line in (tmp_path / "eval" / "rewards.jsonl").read_text().splitlines()]
    written = [[row[key][n] for n in NAMES] for row in lines for key in ("chosen_attributes", "rejected_attributes")]
    np.testing.assert_allclose(np.array(written), pred, atol=1e-4)


@pytest.mark.slow
def test_rm_eval_of_a_model_without_attributes_has_no_attribute_block(exported_tiny, tmp_path):
    from rm.config import DataConfig
    from rm.evaluation.eval_report import EvalOptions, evaluate_model

    src = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"q{i}", "chosen": "yes" * (i + 1), "rejected": "no", "chosen_attributes": {"x": 1}}
            for i in range(4)]  # fmt: skip
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = evaluate_model(str(exported_tiny), DataConfig(source=str(src)), tmp_path / "e", EvalOptions(samples=10))
    saved = json.loads((tmp_path / "e" / "eval.json").read_text())
    assert "attributes" not in result and "attributes" not in saved and "attributes.png" not in saved["eval"]["plots"]
    assert "soft_calibration" not in saved  # no soft labels either
    row = json.loads((tmp_path / "e" / "rewards.jsonl").read_text().splitlines()[0])
    assert set(row) == {"origin", "subset", "chosen_reward", "rejected_reward", "chosen_chars", "rejected_chars"}
    assert (
        not (tmp_path / "e" / "attributes.png").exists()
        and "## Attributes" not in (tmp_path / "e" / "report.md").read_text()
    )
