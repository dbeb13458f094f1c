"""rm's process-reward exports load through the one loader (`rm.scoring.inference.load`) as one-output reward models
whose sigmoid at a step's last token is the exported token classifier's softmax[..., 1] there (plain transformers,
1e-5), for a head named `score` or `classifier` and for an architecture rm wraps itself; any other token classifier
is refused in one line; `Loaded.step_separator` is the model's, else the run's, else the default."""

import pytest
import torch
import yaml
from prm_exports import PROBLEM, SEPARATOR, flat, plain_step_probabilities, prm_export
from transformers import AutoModelForTokenClassification

from conftest import stopped_run, tiny_model
from rm.config import DataConfig, RunConfig
from rm.errors import ModelError
from rm.evaluation.score_file import default_layout
from rm.evaluation.steps.step_scoring import StepProblem, score_steps
from rm.export.folder import Weights, export_model
from rm.model.reward import RewardModel
from rm.scoring.inference import load
from rm.tokens.steps.step_tokens import STEP_SEPARATOR

PROBLEMS = [StepProblem(PROBLEM["prompt"], tuple(tuple(s) for s in PROBLEM["solutions"]))]


def rm_step_probabilities(loaded) -> list:
    """What the scoring room reads: `score_steps` on the loaded model, in its own layout, with its separator."""
    layout = default_layout(loaded.model, loaded.tokenizer.pad_token_id)
    return score_steps(
        loaded.model, loaded.tokenizer, layout, PROBLEMS, max_length=loaded.max_length, separator=loaded.step_separator
    )[0]


@pytest.mark.parametrize("model_type", ["llama", "gpt_neox", "apertus"])
def test_a_process_reward_export_reads_as_the_token_classifier_does(tokenizer, tmp_path, model_type):
    """gpt_neox's token head is `classifier`, its reward head `score`; apertus has no sequence-classification class
    in transformers (rm builds its own)."""
    folder = prm_export(tokenizer, tmp_path / "prm", model_type=model_type)
    loaded = load(str(folder), device="cpu")
    assert isinstance(loaded.model, RewardModel) and loaded.model.hf.config.num_labels == 1
    assert loaded.attributes == [] and loaded.step_separator == SEPARATOR
    got, want = rm_step_probabilities(loaded), plain_step_probabilities(folder, tokenizer, PROBLEM)
    assert [len(s) for s in got] == [2, 3]
    assert flat(got) == pytest.approx(flat(want), abs=1e-5)
    assert max(flat(want)) - min(flat(want)) > 1e-3  # a step read at a wrong position would show


def test_the_reward_row_and_bias_are_row_1_less_row_0(tokenizer, tmp_path):
    """A head whose wrong-label row and biases are not zero (a token classifier written by other code than rm's
    exporter, the config still rm's): softmax([a, b])[1] = sigmoid(b - a), so the difference is exact."""
    folder = prm_export(tokenizer, tmp_path / "prm")
    tok = AutoModelForTokenClassification.from_pretrained(folder).eval()
    torch.manual_seed(5)
    with torch.no_grad():
        tok.score.weight[0].normal_(0.0, 1.0)
        tok.score.bias.copy_(torch.tensor([0.7, -0.4]))
    edited = tmp_path / "edited"
    tok.save_pretrained(edited)
    tokenizer.save_pretrained(edited)
    loaded = load(str(edited), device="cpu")
    head = loaded.model.hf.score
    assert torch.equal(head.weight[0], tok.score.weight[1] - tok.score.weight[0])
    assert head.bias.item() == pytest.approx(-1.1)
    got, want = rm_step_probabilities(loaded), plain_step_probabilities(edited, tokenizer, PROBLEM)
    assert flat(got) == pytest.approx(flat(want), abs=1e-5)


@pytest.mark.parametrize("change", ["no separator", "three labels"])
def test_any_other_token_classifier_is_refused_in_one_line(tokenizer, tmp_path, change):
    folder = prm_export(tokenizer, tmp_path / "prm")
    tok = AutoModelForTokenClassification.from_pretrained(folder)
    if change == "no separator":
        del tok.config.rm_step_separator
    else:
        config = tok.config
        config.num_labels = 3
        tok = AutoModelForTokenClassification.from_config(config)
    other = tmp_path / "other"
    tok.save_pretrained(other)
    tokenizer.save_pretrained(other)
    with pytest.raises(ModelError) as e:
        load(str(other), device="cpu")
    message = str(e.value)
    assert "LlamaForTokenClassification is a token classifier, not a reward model" in message
    assert str(other) in message and "\n" not in message


def test_the_step_separator_is_the_models_else_the_runs_else_the_default(tokenizer, tmp_path, exported_tiny):
    assert load(str(exported_tiny), device="cpu").step_separator == STEP_SEPARATOR  # a reward export: the default
    run_cfg = RunConfig(output_dir=str(tmp_path / "run"), data=DataConfig(step_separator="\n---\n"))
    reward = export_model(tiny_model(tokenizer), tokenizer, tmp_path / "reward", run_cfg, Weights(None, None))
    assert load(str(reward), device="cpu").step_separator == "\n---\n"  # its run config's data.step_separator

    run = stopped_run(tokenizer, tmp_path / "stopped")  # rebuilt from its checkpoint: the run config's
    assert load(str(run), device="cpu").step_separator == STEP_SEPARATOR
    saved = yaml.safe_load((run / "config.yaml").read_text())
    saved["data"] = {**saved.get("data", {}), "step_separator": " ки\n"}
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert load(str(run), device="cpu").step_separator == " ки\n"
