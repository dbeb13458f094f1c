"""A run with a length head (model.head.length): eval.json states the held-out correlations; the default export
is a plain one-output reward model whose reward, the quality output, plain transformers, `rm score` and `rm serve`
give alike (1e-5); `--with-length-head` keeps the length output too, last and named, its output 0 that reward."""

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForSequenceClassification

from conftest import QUICKSTART, SHORT, plain_transformers_rewards
from rm.cli import main as cli
from rm.config import load_config
from rm.errors import ExportError
from rm.export.folder import export_run
from rm.model.length.length_report import LENGTH_HEAD_FILE
from rm.training.run import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serving import client, scorer_for  # noqa: E402

HH = "\n\nHuman: what is 2 + 3?\n\nAssistant:"
TEXTS = [HH + " 5", HH + " it is 5, as 2 + 3 = 5 and no other sum", HH + " 6"]


@pytest.fixture(scope="module")
def length_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("length_head") / "run"
    main(load_config(QUICKSTART, [*SHORT, "model.head.length=true", f"output_dir={run}"]))
    return run


def test_eval_json_states_both_correlations_on_the_held_out_set(length_run):
    block = json.loads((length_run / "eval.json").read_text())["length_head"]
    assert block["responses"] == 32  # 16 held-out pairs
    assert all(-1 <= block[k] <= 1 for k in ("quality_pearson", "length_pearson"))
    assert (length_run / LENGTH_HEAD_FILE).is_file()
    card = (length_run / "export" / "README.md").read_text()
    assert "`loss.length_corr_coef`" in card and "`loss.length_orth_coef`" in card and "ODIN" in card
    assert f"reward {block['quality_pearson']:.3f}, length output {block['length_pearson']:.3f}" in card


def test_the_default_export_is_the_quality_output_everywhere(length_run, tmp_path):
    export = length_run / "export"
    config = json.loads((export / "config.json").read_text())
    assert config.get("num_labels", 1) == 1 and config["id2label"] == {"0": "reward"}
    plain = plain_transformers_rewards(export, TEXTS)
    assert plain.shape == (3,)
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    assert cli(["score", "--model", str(export), "--input", str(data), "--out", str(tmp_path / "s.jsonl")]) == 0
    scored = [json.loads(line)["reward"] for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    with client(scorer_for(str(export))) as c:
        answer = c.post("/score", json={"texts": TEXTS})
    assert answer.status_code == 200, answer.text
    torch.testing.assert_close(torch.tensor(scored), plain, rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.tensor(answer.json()["rewards"]), plain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("source", ["run", "checkpoint"])
def test_with_length_head_keeps_the_length_output_last_and_named(length_run, tmp_path, source):
    path = length_run if source == "run" else length_run / "checkpoints" / "step-2"
    out = tmp_path / "both"
    assert cli(["export", str(path), "--out", str(out), "--with-length-head"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "reward", "1": "length"}
    both = AutoModelForSequenceClassification.from_pretrained(out).eval()
    with safe_open(str(length_run / "checkpoints" / "step-2" / "model.safetensors"), framework="pt") as f:
        row = f.get_tensor(next(k for k in f.keys() if k.endswith("length_head.linear.weight")))
    torch.testing.assert_close(both.score.weight[1:], row)
    logits = plain_transformers_rewards(out, TEXTS)
    assert logits.shape == (3, 2)
    default = plain_transformers_rewards(length_run / "export", TEXTS)
    torch.testing.assert_close(logits[:, 0], default, rtol=0, atol=1e-6)
    card = (out / "README.md").read_text()
    assert "| 1 | `length` |" in card and "for analysis, not a reward" in card


def test_with_length_head_is_refused_for_a_run_without_one(tmp_path):
    plain = tmp_path / "plain"
    main(load_config(QUICKSTART, [*SHORT, "train.max_steps=1", f"output_dir={plain}"]))
    with pytest.raises(ExportError, match="this run trained no length head"):
        export_run(plain, tmp_path / "out", with_length_head=True)
