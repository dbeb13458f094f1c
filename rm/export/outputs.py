"""The export's named outputs: the reward at index 0, then one regression output per attribute.

A model trained with `model.head.attributes` has a score head of 1 + A outputs, named at build time in its
config's `id2label` (rm/model/build.py:output_labels). The export keeps that layout as a plain
`AutoModelForSequenceClassification`: `num_labels = 1 + A`, `id2label = {0: "reward", 1: name, …}`,
`problem_type: "regression"` (no sigmoid or softmax anywhere) and `attribute_scales: {name: [min, max]}`, so
every client that reads `logits[:, 0]` keeps reading the reward and `logits[:, 1:]` are the attributes, in the
order of `id2label`. A model without attributes is exported exactly as before (one output named "reward").

`export.reward_only` (`rm export --reward-only`) keeps row 0 of the score head alone: the same reward in a
one-output model (num_labels=1, no attribute labels or scales), for tools that read a single output (OpenRLHF's
one-output head, a default text-classification pipeline). With `loss.attribute_loss=gaussian` each attribute's
learned sigma (the noise the loss attributed to its ratings) is written as `attribute_sigma: {name: sigma}`.
`rm export --with-length-head` appends a length head's row last, named `length` (rm/export/length_output.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from transformers import PreTrainedModel

from rm.config import RunConfig
from rm.config.rundir import RunDir
from rm.errors import ExportError
from rm.model.length.length_report import LENGTH_HEAD_FILE
from rm.model.reward import score_head, transformers_model

LENGTH_LABEL = "length"
"""`id2label` of a length head's output, kept last by `rm export --with-length-head` (`append_length_row`)."""


def attribute_names(hf: PreTrainedModel) -> list[str]:
    """The names of outputs 1.. of the score head, from its config's `id2label`; [] for a one-output head."""
    outputs = score_head(hf).out_features
    labels = {int(k): v for k, v in (hf.config.id2label or {}).items()}
    return [labels.get(i, f"attribute_{i}") for i in range(1, outputs)]


def unnamed_outputs(hf: PreTrainedModel) -> str:
    """Why the head cannot be exported as a reward model, or "": extra outputs must be named attributes, with
    output 0 the reward (what rm/model/build.py:output_labels writes)."""
    outputs = score_head(hf).out_features
    labels = {int(k): v for k, v in (hf.config.id2label or {}).items()}
    if outputs == 1 or (labels.get(0) == "reward" and len(labels) == outputs):
        return ""
    return f"the score head has {outputs} outputs; a reward model has 1, or 1 + one per model.head.attributes name"


def attribute_scales(cfg: RunConfig, names: list[str]) -> dict[str, list[float] | None]:
    """Each attribute's [min, max]: declared (`model.head.attribute_scales`), else as the run's data report states
    it (inferred from the data), else None where neither is at hand (an export without its run directory)."""
    stated: dict = {}
    report = RunDir(Path(cfg.output_dir)).data_report
    if report.is_file():
        stated = {k: v.get("scale") for k, v in json.loads(report.read_text()).get("attributes", {}).items()}
    declared = cfg.model.head.attribute_scales
    return {name: list(declared[name]) if name in declared else stated.get(name) for name in names}


def tie_reward_row(hf: PreTrainedModel) -> None:
    """With `reward_from_attributes` in the config (rm/model/build.py:set_reward_mix), write that mix of the head's
    attribute rows into row 0 (weight and bias; `hf` changed in place), so that plain transformers' logits[:, 0]
    is the mix that training read as the reward, in a plain `AutoModelForSequenceClassification`. Idempotent;
    nothing for a head without attribute rows or without a mix."""
    mix = getattr(hf.config, "reward_from_attributes", None)
    head = score_head(hf)
    names = attribute_names(hf)
    if not mix or not names:
        return
    w = torch.tensor([float(mix.get(name, 0.0)) for name in names], dtype=torch.float64, device=head.weight.device)
    with torch.no_grad():  # in float64, then rounded once to the head's dtype
        head.weight[0] = (w @ head.weight[1:].double()).to(head.weight.dtype)  # [A] @ [A, H] -> [H]
        if head.bias is not None:
            head.bias[0] = (w @ head.bias[1:].double()).to(head.bias.dtype)


def set_output_labels(hf: PreTrainedModel, scales: dict[str, list[float] | None]) -> None:
    """num_labels, id2label/label2id and attribute_scales for the head's outputs (one: the reward alone); row 0
    made the mix of the attribute rows where the reward is one (`tie_reward_row`)."""
    tie_reward_row(hf)
    labels = ["reward", *attribute_names(hf)]
    hf.config.num_labels = len(labels)
    hf.config.id2label = dict(enumerate(labels))
    hf.config.label2id = {name: i for i, name in enumerate(labels)}
    if len(labels) > 1:
        hf.config.attribute_scales = scales
        return
    for key in ("attribute_scales", "attribute_sigma"):
        if hasattr(hf.config, key):
            delattr(hf.config, key)


def mix_sentence(mix: dict[str, float] | None) -> str:
    """The card's statement of a reward that is a fixed mix of the attribute outputs, or "" without one."""
    if not mix:
        return ""
    terms = " + ".join(f"{w:g} * `{name}`" for name, w in mix.items())
    return (
        f" The reward is not an output of its own: it is the fixed mix reward = {terms} of the attribute outputs "
        "(`model.head.reward_from_attributes`, recorded in config.json as `reward_from_attributes`), trained as the "
        "reward through that mix and written into row 0 of the score head, so `logits[:, 0]` equals it exactly."
    )


def outputs_section(names: list[str], dropped: list[str], sigma: dict | None, mix: dict | None = None) -> str:
    """The card's Outputs section: what each output is and how to read them, and the mix the reward
    is (`mix_sentence`) where it is one."""
    if not names:
        left_out = (
            f" This is the reward-only export of a model trained with attribute outputs ({', '.join(dropped)}): "
            "they are left out here, and the full export has them."
        )
        return (
            "## Outputs\n\nOne output, `reward` (`num_labels=1`): `logits[:, 0]` is the reward. A text-classification "
            'pipeline returns it as the score of the label `reward` (`function_to_apply="none"` keeps it raw).'
            f"{left_out if dropped else ''}{mix_sentence(mix) if dropped else ''}\n\n"
        )
    sigma = sigma or {}
    rows = "\n".join(
        f"| {i} | `{name}` | regression on the `{name}` ratings"
        + (f" (learned noise sigma {sigma[name]:.4g})" if name in sigma else "")
        + " |"
        for i, name in enumerate(names, 1)
    )
    return (
        "## Outputs\n\n| index | `id2label` | what |\n| --- | --- | --- |\n| 0 | `reward` | the reward (as above) |\n"
        f"{rows}\n\n`logits[:, 0]` is the reward and `logits[:, 1:]` the ratings, on the scales in config.json's "
        '`attribute_scales`. `pipeline("text-classification", model=..., top_k=None, function_to_apply="none")` '
        "returns every named output; the default pipeline returns only the top label of a model with several outputs, "
        "which need not be the reward. Tools that read one output (OpenRLHF, default pipelines) want the reward-only "
        f"export: `python -m rm export RUN --out DIR --reward-only`.{mix_sentence(mix)}\n\n"
    )


def keep_reward_only(hf: PreTrainedModel) -> list[str]:
    """Cut the score head to its row 0 (the reward; `hf` changed in place) and return the attribute outputs
    dropped: a one-output head computes exactly the reward the full head's logits[:, 0] did."""
    head, dropped = score_head(hf), attribute_names(hf)
    if not dropped:
        return []
    tie_reward_row(hf)  # a reward that is a mix of the attributes: row 0 becomes that mix before the rest goes
    name = next(n for n in ("score", "classifier") if getattr(hf, n, None) is head)
    one = torch.nn.Linear(head.in_features, 1, bias=head.bias is not None, device=head.weight.device)
    with torch.no_grad():
        one.weight.copy_(head.weight[:1])
        if head.bias is not None:
            one.bias.copy_(head.bias[:1])
    setattr(hf, name, one.to(head.weight.dtype))
    hf.config.id2label, hf.config.label2id = {0: "reward"}, {"reward": 0}
    return dropped


def note_attribute_sigma(model: torch.nn.Module, log_scale: torch.Tensor | None) -> None:
    """`attribute_sigma: {name: sigma}` in the config of `model` (a transformers or peft model) from the learned
    log-scales of `loss.attribute_loss=gaussian` (RewardModel.attribute_log_scale); nothing without them."""
    if log_scale is None:
        return
    hf = transformers_model(model)
    labels = {int(k): v for k, v in (hf.config.id2label or {}).items()}
    values = log_scale.detach().float().cpu().tolist()
    hf.config.attribute_sigma = {labels.get(i + 1, f"attribute_{i + 1}"): math.exp(v) for i, v in enumerate(values)}


def set_reward_config(hf: PreTrainedModel, pad_token_id: int, norm: dict | None, scales: dict | None = None) -> None:
    """One raw reward (and named attribute outputs after it: rm/export/outputs.py), read as regression (so a
    text-classification pipeline applies no sigmoid), and the normalisation both as `reward_normalization`
    and as the `mean`/`std` that OpenRLHF reads."""
    set_output_labels(hf, scales or {})
    hf.config.problem_type = "regression"
    hf.config.pad_token_id = pad_token_id
    for key in ("reward_normalization", "mean", "std"):
        if hasattr(hf.config, key):
            delattr(hf.config, key)
    if norm is not None:
        hf.config.reward_normalization = norm
        hf.config.mean, hf.config.std = norm["mean"], norm["std"]


def append_length_row(hf: PreTrainedModel, trained_length: bool) -> None:
    """Append the length row (`rm_length_row`) to the score head as its last output, named `length` (`hf` changed
    in place); output 0 stays the reward, bit for bit. Refused in one line where the run trained no length head or
    its row is not at hand."""
    row = getattr(hf, "rm_length_row", None)
    if not trained_length:
        raise ExportError("--with-length-head: this run trained no length head (model.head.length is false)")
    if row is None:
        raise ExportError(
            f"--with-length-head: the length head of these weights is not at hand (no {LENGTH_HEAD_FILE} in the run "
            "directory): export one of the run's checkpoints, which hold it"
        )
    head = score_head(hf)
    name = next(n for n in ("score", "classifier") if getattr(hf, n, None) is head)
    rows = head.out_features
    wider = torch.nn.Linear(head.in_features, rows + 1, bias=head.bias is not None, device=head.weight.device)
    with torch.no_grad():
        wider.weight[:rows] = head.weight.float()
        wider.weight[rows] = row.reshape(-1).float().to(head.weight.device)
        if head.bias is not None:
            wider.bias.zero_()
            wider.bias[:rows] = head.bias.float()
    setattr(hf, name, wider.to(head.weight.dtype))
    labels = [str(v) for _, v in sorted((int(k), v) for k, v in (hf.config.id2label or {0: "reward"}).items())]
    labels = [*labels[:rows], LENGTH_LABEL]
    hf.config.num_labels = len(labels)
    hf.config.id2label = dict(enumerate(labels))
    hf.config.label2id = {n: i for i, n in enumerate(labels)}
