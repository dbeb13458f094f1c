"""Round trips: a model as training holds it (full, or LoRA-wrapped by peft) -> export folder -> plain
transformers and the text-classification pipeline, which must give the training-time rewards."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

from conftest import tiny_model
from rm.config import RunConfig
from rm.data.load import load_pairs
from rm.errors import ExportError
from rm.evaluation.summary import summarize
from rm.export.folder import ExportOptions, Weights, export_model
from rm.model.reward import RewardModel

ARCHS = ["llama", "qwen2", "gpt_neox"]
LORA_TARGETS = {"llama": ["q_proj", "v_proj", "down_proj"], "qwen2": ["q_proj", "v_proj", "down_proj"]}
LORA_TARGETS["gpt_neox"] = ["query_key_value", "dense_4h_to_h"]


@pytest.fixture(scope="module")
def texts(synthetic_root):
    """Prompt + response texts of varied lengths (padding matters in a batch)."""
    pairs = load_pairs(str(synthetic_root), "test", [])[:6]
    return [p.prompt + p.chosen for p in pairs] + [p.prompt + p.rejected for p in pairs[:2]]


def rm_rewards(hf, tokenizer, texts: list[str]) -> torch.Tensor:
    """Training-time rewards: rm's RewardModel, one unpadded sequence at a time."""
    model = RewardModel(hf).eval()
    with torch.no_grad():
        rows = [torch.tensor([tokenizer(t)["input_ids"]]) for t in texts]
        return torch.stack([model(input_ids=ids, attention_mask=torch.ones_like(ids))[0] for ids in rows])


def transformers_rewards(folder, texts: list[str]) -> torch.Tensor:
    """Plain transformers on the folder: one right-padded batch."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(**tokenizer(texts, return_tensors="pt", padding=True)).logits[:, 0]


def pipeline_rewards(folder, texts: list[str]) -> torch.Tensor:
    pipe = pipeline("text-classification", model=str(folder), function_to_apply="none")
    out = [pipe(t)[0] for t in texts]
    assert {o["label"] for o in out} == {"reward"}
    return torch.tensor([o["score"] for o in out])


def lora_trained(hf, tokenizer, texts: list[str], model_type: str):
    """Wrap in peft LoRA (score head trained in full), then take Bradley-Terry steps so every
    LoRA B matrix and the head's copy move away from their initial values."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS[model_type], modules_to_save=["score"])
    peft_model = get_peft_model(hf, config)
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=3e-2)
    batch = tokenizer(texts[:4], return_tensors="pt", padding=True)
    for _ in range(2):
        r = peft_model(**batch).logits[:, 0]
        loss = -torch.nn.functional.logsigmoid(r[:2] - r[2:]).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return peft_model.eval()


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("model_type", ARCHS)
@pytest.mark.slow
def test_export_scores_like_the_training_time_model(tokenizer, texts, tmp_path, model_type, lora):
    hf = tiny_model(tokenizer, model_type, seed=3)
    with torch.no_grad():  # a head that is not at its initial values, so a lost head would show
        RewardModel(hf).hf.score.weight.normal_(0, 1.0)
    model = lora_trained(hf, tokenizer, texts, model_type) if lora else hf
    if lora:
        with torch.no_grad():  # reference: the unmerged peft model, on unpadded rows
            rows = [torch.tensor([tokenizer(t)["input_ids"]]) for t in texts]
            expected = torch.stack([model(input_ids=ids).logits[0, 0] for ids in rows])
        wrapper = model.base_model.model.score
        trained_head = wrapper.modules_to_save["default"].weight.detach().clone()
        assert not torch.equal(trained_head, wrapper.original_module.weight)
        lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
        assert lora_b and all(p.abs().sum() > 0 for p in lora_b)
    else:
        expected = rm_rewards(hf, tokenizer, texts)

    out = export_model(model, tokenizer, tmp_path / "export", RunConfig(), Weights(5, 5))

    got = transformers_rewards(out, texts)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0), (got - expected).abs().max()
    assert torch.allclose(pipeline_rewards(out, texts), expected, atol=1e-5, rtol=0)
    state = load_file(out / "model.safetensors")
    head = "score.weight"
    assert head in state and state[head].shape[0] == 1
    assert not any("lora" in k or "base_layer" in k or "modules_to_save" in k for k in state)
    if lora:
        assert torch.equal(state[head], trained_head)  # the trained copy, not peft's original_module
        card = (out / "README.md").read_text()
        assert "- lora" in card and f"r 4, alpha 8, on {', '.join(sorted(LORA_TARGETS[model_type]))}" in card
    fresh = AutoModelForSequenceClassification.from_pretrained(out)
    assert fresh.config.num_labels == 1 and fresh.config.pad_token_id == tokenizer.pad_token_id
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "chat_template.jinja",
        "config.json",
        "model.safetensors",
        "rm_config.yaml",
        "tokenizer.json",
        "tokenizer_config.json",
    ]


def test_the_chat_template_travels_with_the_tokenizer(tokenizer, tmp_path):
    tok = AutoTokenizer.from_pretrained(_saved(tokenizer, tmp_path / "tok"))
    tok.chat_template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}"
    out = export_model(tiny_model(tok), tok, tmp_path / "export", RunConfig(), Weights(1, 1))
    loaded = AutoTokenizer.from_pretrained(out)
    rendered = loaded.apply_chat_template([{"role": "Human", "content": "hi"}], tokenize=False)
    assert rendered == "[Human] hi"
    assert "carries the chat template" in (out / "README.md").read_text()


def _saved(tokenizer, path):
    tokenizer.save_pretrained(path)
    return path


def test_an_existing_folder_is_only_replaced_when_asked_and_only_if_it_is_an_export(tokenizer, tmp_path):
    model = tiny_model(tokenizer)
    out = export_model(model, tokenizer, tmp_path / "export", RunConfig(), Weights(1, 1))
    with pytest.raises(ExportError, match="not empty; pass --overwrite"):
        export_model(model, tokenizer, out, RunConfig(), Weights(1, 1))
    export_model(model, tokenizer, out, RunConfig(), Weights(1, 1), options=ExportOptions(overwrite=True))
    assert (out / "model.safetensors").is_file()
    # A file an export never writes is the user's: overwrite refuses rather than delete it.
    (out / "stale.txt").write_text("my notes beside the export")
    with pytest.raises(ExportError, match="which an rm export does not write"):
        export_model(model, tokenizer, out, RunConfig(), Weights(1, 1), options=ExportOptions(overwrite=True))
    assert (out / "stale.txt").read_text() == "my notes beside the export"
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    (precious / "config.json").write_text("{}")  # a model folder, but not one rm wrote (no rm_config.yaml)
    with pytest.raises(ExportError, match="holds no rm export"):
        export_model(model, tokenizer, precious, RunConfig(), Weights(1, 1), options=ExportOptions(overwrite=True))
    assert (precious / "notes.txt").read_text() == "keep me"
    assert not list(tmp_path.glob(".*.partial"))


def test_a_head_with_more_than_one_output_is_refused(tokenizer, tmp_path):
    model = tiny_model(tokenizer)
    model.score = torch.nn.Linear(model.score.in_features, 2, bias=False)
    model.config.num_labels = 2
    with pytest.raises(ExportError, match="2 outputs"):
        export_model(model, tokenizer, tmp_path / "export", RunConfig(), Weights(1, 1))
    assert not (tmp_path / "export").exists()


def test_an_undefined_metric_is_null_in_the_exports_eval_json_as_in_the_runs(tokenizer, tmp_path):
    """An eval of no pairs has no accuracy (NaN): the run's eval.json says null, and so must the export's,
    which a strict JSON parser would otherwise refuse (`NaN` is not JSON)."""
    result = {"overall": summarize(torch.zeros(0), torch.zeros(0)), "subsets": {}}
    assert math.isnan(result["overall"]["accuracy"])
    out = export_model(tiny_model(tokenizer), tokenizer, tmp_path / "export", RunConfig(), Weights(1, 1, result))
    text = (out / "eval.json").read_text()
    saved = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in eval.json is not JSON"))
    assert saved["overall"]["accuracy"] is None and saved["overall"]["n"] == 0
