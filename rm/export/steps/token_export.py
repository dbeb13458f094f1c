"""A process reward model as the architecture's own `…ForTokenClassification`, which plain transformers loads.

rm reads a process reward with the one-output `score` head of its sequence-classification model, applied at the
last token of every step: logit r_t at position t, and sigmoid(r_t) the probability that the step is correct
(`RewardModel(hf)(input_ids, attention_mask, reward_index=...)`). Readers of process reward models (TRL's
`PRMTrainer`, Math-Shepherd-style evaluation code) expect a token classifier instead: two labels per position,
softmax over them. `as_token_classification` builds that class on the same backbone and writes a head whose
softmax is the same probability at every position:

    row 0 ("wrong")   = 0,            bias 0
    row 1 ("correct") = the score row, bias = the score head's bias (0 where it has none: decoders' have none)

so softmax(logits)[t, 1] = exp(r_t) / (exp(0) + exp(r_t)) = sigmoid(r_t), and logits[t, 1] - logits[t, 0] = r_t.
The label ids follow TRL's PRMTrainer (label 1: the step is correct). Every token-classification head of
transformers 5 has a bias (`token_classification_bias`, default true), and so do those of transformers 4.x, which
ignore that key: the bias is always written (row 0 zero), so no version starts it at random. The classes put a
dropout before the head (p = `classifier_dropout`, else 0.1): the identity in eval mode, in which this module and
`from_pretrained` both return the model; in training mode the probabilities would be noisy.

Architectures without the class. Of the 200 model types of transformers 5.25's causal-LM mapping, 60 have a
`…ForTokenClassification` (llama, qwen2, qwen3, qwen3_moe, mistral, mixtral, gemma, gemma2, phi3, gpt2, gpt_neox,
falcon, deepseek_v3…) and 140 have none: olmo, olmo2, gemma3_text, gptj, opt, jamba… (which have a
sequence-classification class) and every architecture rm wraps in its own reward head but apertus and beam
(granite, cohere2, olmoe, llama4_text, mamba…). Those are refused in one line (`ExportError`) rather than given a
class of rm's: rm ships a head of its own for sequence classification (rm/export/modeling.py, loaded with
`trust_remote_code=True`), but mirroring it would mean a second head module in rm/model, a second shipped file and
its card text, for readers (TRL, PRM evaluation code) that load standard classes; the reward-model export of the
same weights still works for every architecture.

The backbone is not copied: the returned model holds the very backbone module of the model it was built from
(exact, and no second copy of a 7B model in memory), so changing one changes the other. `export_model`
(rm/export/folder.py, `ExportOptions.step_separator`) writes the folder as it writes every export, with the card of
rm/export/steps/step_card.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES

from rm.config import RunConfig
from rm.config.rundir import RunDir
from rm.errors import ExportError
from rm.export.modeling import AUTO, FILE

STEP_LABELS = {0: "wrong", 1: "correct"}
"""`id2label` of the export: softmax(logits)[..., 1] is the probability that the step ending there is correct."""
SEPARATOR_KEY = "rm_step_separator"
"""config.json key holding the text that ends each step, so that a reader splits a solution as training did."""
REWARD_KEYS = ("reward_normalization", "mean", "std", "attribute_scales", "attribute_sigma", "reward_from_attributes")
"""Keys an rm reward export writes that describe the reward output (its normalisation, its attribute outputs); a
probability per step has none of them. `pad_token_id` and the rope keys still apply and are kept."""
LOSS_KEYS = ("rm_davidson_nu",)
"""Keys describing the pairwise loss's tie parameter, which the token classifier does not use."""

__all__ = ["STEP_LABELS", "as_token_classification", "token_class"]


def token_class(config: PretrainedConfig) -> type[PreTrainedModel] | None:
    """transformers' own `…ForTokenClassification` for `config`'s model type, or None where it has none.

    By model type in transformers' own table, as `rm.model.architecture.is_native` does, so a class some
    repository's remote code registered in this process is never taken for one transformers ships."""
    name = MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES.get(getattr(config, "model_type", None))
    return getattr(transformers, name, None) if name else None


def exportable_as_steps(config: PretrainedConfig) -> type[PreTrainedModel]:
    """transformers' token-classification class for `config`, or the one-line refusal (before training, too: a
    stepwise run checks it once its model is built, not after hours of training)."""
    cls = token_class(config)
    if cls is None:
        raise ExportError(
            f"transformers has no token-classification class for {config.model_type!r}, so a process reward model "
            "of it cannot be exported as a standard AutoModelForTokenClassification: train a model type that has "
            "one (llama, qwen2, qwen3, mistral, gemma…), or set export.enabled=false (rm score and rm serve read "
            "the run's checkpoints)"
        )
    return cls


def head_of(model: PreTrainedModel) -> tuple[str, nn.Linear]:
    """(attribute, layer) of the classifier: the one child other than the backbone that holds weights.

    Found by structure, not by name: a sequence classifier's head is `score` where the token classifier of the
    same architecture may call it `classifier` (GPT-NeoX, GPT-2, Falcon, Bloom)."""
    prefix = model.base_model_prefix
    heads = [(n, c) for n, c in model.named_children() if n != prefix and any(True for _ in c.parameters())]
    if len(heads) != 1 or not isinstance(heads[0][1], nn.Linear):
        found = ", ".join(f"{n} ({type(c).__name__})" for n, c in heads) or "none"
        raise ExportError(
            f"{type(model).__name__}: a process reward needs one linear head beside the backbone, found {found}"
        )
    return heads[0]


def step_config(config: PretrainedConfig, step_separator: str) -> PretrainedConfig:
    """A copy of the reward model's config for the token classifier: two labels, the separator, no reward keys."""
    out = copy.deepcopy(config)
    out.num_labels = len(STEP_LABELS)
    out.id2label = dict(STEP_LABELS)
    out.label2id = {label: i for i, label in STEP_LABELS.items()}
    out.problem_type = "single_label_classification"  # softmax over the two labels at each position
    setattr(out, SEPARATOR_KEY, step_separator)
    for key in REWARD_KEYS + LOSS_KEYS:
        if hasattr(out, key):
            delattr(out, key)
    auto = dict(getattr(out, "auto_map", None) or {})
    if auto.get(AUTO, "").startswith(FILE.removesuffix(".py") + "."):  # rm's reward head: not in this folder
        del auto[AUTO]
        out.auto_map = auto
        if not auto:
            delattr(out, "auto_map")
    return out


def step_head(score: nn.Linear, bias: bool) -> nn.Linear:
    """[2, H] head with row 0 zero and row 1 the one-output score row, so softmax(...)[1] = sigmoid(score)."""
    if score.bias is not None and not bias:
        raise ExportError("the score head has a bias and the token-classification head has none: not exportable")
    w = score.weight
    head = nn.Linear(score.in_features, len(STEP_LABELS), bias=bias, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[1] = w[0]
        if bias:
            head.bias.zero_()
            if score.bias is not None:
                head.bias[1] = score.bias[0]
    return head


def as_token_classification(model: nn.Module, step_separator: str) -> PreTrainedModel:
    """The architecture's `…ForTokenClassification` on `model`'s backbone, in eval mode: softmax(logits)[b, t, 1]
    is sigmoid of the reward the one-output score head gives at position t (`RewardModel(..., reward_index=...)`).

    `model` is a trained one-output sequence-classification model as rm holds it (a native class, or rm's reward
    head on a causal LM's backbone), LoRA already merged (`rm.export.folder.merged`, as `export_model` does).
    `step_separator` (the text that ends each step) is kept in config.json as `rm_step_separator`. The backbone
    module is shared with `model`, not copied. Raises ExportError for a model type transformers has no
    token-classification class for, and for a head that is not one linear output.
    """
    if not isinstance(step_separator, str) or not step_separator:
        raise ExportError(f"the step separator must be a non-empty string, got {step_separator!r}")
    if callable(getattr(model, "get_base_model", None)):
        raise ExportError("a peft model: merge its LoRA weights first (rm.export.folder.merged)")
    hf = model
    config = hf.config
    cls = exportable_as_steps(config)
    name, score = head_of(hf)
    if score.out_features != 1:
        raise ExportError(
            f"the {name} head has {score.out_features} outputs; a process reward model has 1 (export the reward "
            "alone first: rm/export/outputs.py:keep_reward_only)"
        )
    with torch.device("meta"):  # no weights allocated: the backbone is `hf`'s own, the head is built below
        tok = cls(step_config(config, step_separator))
    expected = set(tok.state_dict())
    prefix, backbone = tok.base_model_prefix, hf.get_submodule(hf.base_model_prefix)
    if type(tok.get_submodule(prefix)) is not type(backbone):
        raise ExportError(
            f"{cls.__name__} holds a {type(tok.get_submodule(prefix)).__name__}, {type(hf).__name__} a "
            f"{type(backbone).__name__}: the backbone cannot be carried over"
        )
    setattr(tok, prefix, backbone)
    tok_name, tok_head = head_of(tok)
    setattr(tok, tok_name, step_head(score, tok_head.bias is not None))
    if set(tok.state_dict()) != expected:  # e.g. an encoder's pooler, which its token classifier lacks
        extra, missing = sorted(set(tok.state_dict()) - expected), sorted(expected - set(tok.state_dict()))
        raise ExportError(
            f"{cls.__name__} would be saved under names it does not load: extra {extra[:3]}, missing {missing[:3]}"
        )
    left = [n for n, t in [*tok.named_parameters(), *tok.named_buffers()] if t.is_meta]
    if left:
        raise ExportError(f"{cls.__name__}: {left[:3]} were not carried over from {type(hf).__name__}")
    return tok.eval()


def run_step_separator(run_dir: Path, cfg: RunConfig) -> str:
    """The step separator of a run trained on stepwise data (its data report counts problems with step labels),
    else "": what `rm export RUN` exports a process reward model with."""
    path = RunDir(run_dir).data_report
    try:
        steps = json.loads(path.read_text()).get("labels", {}).get("steps", {})
    except (OSError, ValueError, AttributeError):
        return ""
    return cfg.data.step_separator if isinstance(steps, dict) and steps.get("items") else ""
