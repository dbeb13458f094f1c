"""The export's named outputs (issue 26): the reward at index 0, then one regression output per attribute.

A model trained with `model.head.attributes` has a score head of 1 + A outputs, named at build time in its
config's `id2label` (rm/model/build.py:output_labels). The export keeps that layout as a plain
`AutoModelForSequenceClassification`: `num_labels = 1 + A`, `id2label = {0: "reward", 1: name, …}`,
`problem_type: "regression"` (no sigmoid or softmax anywhere) and `attribute_scales: {name: [min, max]}`, so
every client that reads `logits[:, 0]` keeps reading the reward and `logits[:, 1:]` are the attributes, in the
order of `id2label`. A model without attributes is exported exactly as before (one output named "reward").
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import PreTrainedModel

from rm.config import RunConfig
from rm.config.rundir import RunDir
from rm.model.reward import score_head


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


def set_output_labels(hf: PreTrainedModel, scales: dict[str, list[float] | None]) -> None:
    """num_labels, id2label/label2id and attribute_scales for the head's outputs (one: the reward alone)."""
    labels = ["reward", *attribute_names(hf)]
    hf.config.num_labels = len(labels)
    hf.config.id2label = dict(enumerate(labels))
    hf.config.label2id = {name: i for i, name in enumerate(labels)}
    if len(labels) > 1:
        hf.config.attribute_scales = scales
    elif hasattr(hf.config, "attribute_scales"):
        delattr(hf.config, "attribute_scales")
