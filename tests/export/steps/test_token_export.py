"""A process reward model exported as `AutoModelForTokenClassification`: plain transformers, loading the folder,
must give at every position t the probability sigmoid(r_t) that rm's own forward gives from the one-output score
head there (`RewardModel(hf)(..., reward_index=...)`), in a right-padded batch of two rows of different lengths."""

import json

import pytest
import torch
from transformers import AutoModelForTokenClassification

from conftest import tiny_model
from rm.config import RunConfig
from rm.errors import ExportError
from rm.export.folder import ExportOptions, Weights, export_model, merged
from rm.export.steps.token_export import STEP_LABELS, as_token_classification
from rm.model.reward import RewardModel

SEPARATOR = "\n\n"
LENGTHS = (13, 8)
"""Two rows, right-padded to 13: the second has 5 pad positions."""
READ = {0: [0, 4, 7, 12], 1: [2, 5, 7]}
"""Positions read in each row (the last token of each step); row 1's last attended position is 7."""


def with_random_score(hf, seed: int = 1):
    """The tiny model with a score row far from its small initial values, so a wrong row or sign shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        hf.score.weight.normal_(0.0, 1.0)
    return hf


def padded_batch(vocab: int, pad_id: int, seed: int = 2) -> dict[str, torch.Tensor]:
    """Random ids (never the pad id) in rows of LENGTHS, right padding."""
    g = torch.Generator().manual_seed(seed)
    width = max(LENGTHS)
    ids = torch.full((len(LENGTHS), width), pad_id)
    mask = torch.zeros((len(LENGTHS), width), dtype=torch.long)
    for row, n in enumerate(LENGTHS):
        drawn = torch.randint(0, vocab - 1, (n,), generator=g)
        ids[row, :n] = drawn + (drawn >= pad_id).long()  # skips pad_id
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def step_export(hf, tokenizer, tmp_path):
    """`export_model` of a process reward model (a run on stepwise data exports the same way)."""
    cfg, options = RunConfig(output_dir=str(tmp_path / "run")), ExportOptions(step_separator=SEPARATOR)
    return export_model(hf, tokenizer, tmp_path / "steps", cfg, Weights(None, None), options=options)


def flat_index(width: int) -> torch.Tensor:
    return torch.tensor([row * width + t for row, ts in READ.items() for t in ts])


def rm_probabilities(model, batch) -> torch.Tensor:
    """sigmoid of rm's step rewards at READ's positions: the reference."""
    index = flat_index(batch["input_ids"].shape[1])
    with torch.no_grad():
        return RewardModel(model).eval()(batch["input_ids"], batch["attention_mask"], reward_index=index).sigmoid()


def token_probabilities(model, batch) -> torch.Tensor:
    """softmax over the two labels, label 1 ("correct"), at READ's positions."""
    with torch.no_grad():
        logits = model(**batch).logits  # [rows, T, 2]
    return logits.softmax(-1)[..., 1].reshape(-1)[flat_index(batch["input_ids"].shape[1])]


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt_neox", "gemma", "apertus"])
def test_exported_token_classifier_gives_rms_step_probabilities(tokenizer, tmp_path, model_type):
    """gpt_neox's token head is `classifier` where its reward head is `score`; gemma scales its embeddings by a
    buffer; apertus has no sequence-classification class (rm wraps its backbone in its own head) but has a
    token-classification one."""
    hf = with_random_score(tiny_model(tokenizer, model_type))
    batch = padded_batch(len(tokenizer), tokenizer.pad_token_id)
    expected = rm_probabilities(hf, batch)
    assert expected.min() < 0.2 and expected.max() > 0.8  # the random row gives clearly different probabilities

    tok = as_token_classification(hf, SEPARATOR)
    assert not tok.training
    backbone = tok.get_submodule(tok.base_model_prefix)
    assert backbone is hf.get_submodule(hf.base_model_prefix)  # shared, not copied
    torch.testing.assert_close(token_probabilities(tok, batch), expected, rtol=0, atol=1e-6)

    out = step_export(hf, tokenizer, tmp_path)
    names = sorted(p.name for p in out.iterdir())
    assert "model.safetensors" in names and not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl"))]
    assert "rm_config.yaml" in names and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

    loaded, info = AutoModelForTokenClassification.from_pretrained(out, output_loading_info=True)
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    assert type(loaded) is type(tok)
    torch.testing.assert_close(token_probabilities(loaded.eval(), batch), expected, rtol=0, atol=1e-6)


def test_config_names_the_labels_and_separator_and_drops_reward_keys(tokenizer, tmp_path):
    hf = with_random_score(tiny_model(tokenizer, "llama"))
    hf.config.reward_normalization, hf.config.mean, hf.config.std = {"mean": 0.5, "std": 2.0}, 0.5, 2.0
    hf.config.rm_davidson_nu = 0.3
    hf.config.auto_map = {"AutoModelForSequenceClassification": "modeling_rm_reward.LlamaForSequenceClassification"}
    as_token_classification(hf, SEPARATOR)
    assert hf.config.mean == 0.5 and hf.config.num_labels == 1  # the reward model's own config is left as it was
    out = step_export(hf, tokenizer, tmp_path)
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {str(k): v for k, v in STEP_LABELS.items()}
    assert config["label2id"] == {"wrong": 0, "correct": 1}
    assert config["rm_step_separator"] == SEPARATOR
    assert config["pad_token_id"] == tokenizer.pad_token_id
    assert config["problem_type"] == "single_label_classification"
    assert config["architectures"] == ["LlamaForTokenClassification"]
    assert "rope_theta" in config  # transformers 4.x reads it at the top level (rm/export/compat.py)
    assert not {"reward_normalization", "mean", "std", "rm_davidson_nu", "auto_map"} & set(config)


def test_head_rows_are_zero_then_the_score_row(tokenizer):
    """Written out: softmax([0, r]) = sigmoid(r) needs row 0 and both biases zero (a decoder's score has no bias)."""
    hf = with_random_score(tiny_model(tokenizer, "qwen2"))
    head = as_token_classification(hf, SEPARATOR).score
    assert torch.equal(head.weight[0], torch.zeros_like(head.weight[0]))
    assert torch.equal(head.weight[1], hf.score.weight[0])
    assert torch.equal(head.bias, torch.zeros(2))


def test_a_lora_model_is_merged_first(tokenizer):
    from peft import LoraConfig, get_peft_model

    hf = with_random_score(tiny_model(tokenizer, "llama"))
    model = get_peft_model(
        hf, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=["score"])
    )
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.normal_(0.0, 0.5)  # LoRA starts at B = 0: move it, and the trained copy of the head
    batch = padded_batch(len(tokenizer), tokenizer.pad_token_id)
    expected = rm_probabilities(model, batch)
    tok = as_token_classification(merged(model)[0], SEPARATOR)
    torch.testing.assert_close(token_probabilities(tok, batch), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("model_type", ["olmo2", "granite"])
def test_a_decoder_without_a_token_classification_class_is_refused(tokenizer, model_type):
    """olmo2 has a sequence-classification class in transformers and granite only rm's wrapped one; neither has a
    token-classification class, so there is no standard folder to write."""
    hf = tiny_model(tokenizer, model_type)
    with pytest.raises(ExportError, match=f"no token-classification class for '{model_type}'.*export.enabled=false"):
        as_token_classification(hf, SEPARATOR)


def test_a_head_of_several_outputs_is_refused(tokenizer):
    hf = tiny_model(tokenizer, "llama")
    hf.score = torch.nn.Linear(hf.config.hidden_size, 3, bias=False)
    with pytest.raises(ExportError, match="3 outputs"):
        as_token_classification(hf, SEPARATOR)


def test_an_empty_separator_is_refused(tokenizer):
    with pytest.raises(ExportError, match="separator"):
        as_token_classification(tiny_model(tokenizer, "llama"), "")
