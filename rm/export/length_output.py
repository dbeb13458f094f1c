"""The length head's row in an export: left out by default, kept by `rm export --with-length-head`.

A run with `model.head.length` trains a length output beside the reward (rm/model/length/). Its row lives in the
training wrapper, not in the score head, so a checkpoint's `model.safetensors` holds it under `length_head.` and the
end-of-run export holds none: that export is the plain `num_labels = 1` (or 1 + A) reward model every client loads,
its reward the quality output. The run directory keeps the row (`length_head.safetensors`, rm/model/length/
length_report.py), so `--with-length-head` can append it to the score head of a run's final weights as well as of a
checkpoint's: one more output, last, named `length` in `id2label`, for analysis only (it is not a reward).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from rm.export.outputs import LENGTH_LABEL, append_length_row, note_attribute_sigma
from rm.model.length.length_report import LENGTH_HEAD_FILE
from rm.model.reward import transformers_model

__all__ = ["append_length_row", "length_outputs_section", "run_length_row", "take_wrapper_state"]

PREFIX = "length_head."


def take_wrapper_state(model: torch.nn.Module, f, saved: dict[str, str]) -> None:
    """Take a checkpoint's reward-model state beside the transformers weights out of `saved` (name -> key in `f`):
    the gaussian attribute loss's log-scales (as config.json's `attribute_sigma`) and the length head (its row kept
    on the transformers model as `rm_length_row`, its running statistics dropped)."""
    if "attribute_log_scale" in saved:
        note_attribute_sigma(model, f.get_tensor(saved.pop("attribute_log_scale")))
    for name in [n for n in saved if n.startswith(PREFIX)]:
        key = saved.pop(name)
        if name == PREFIX + "linear.weight":
            transformers_model(model).rm_length_row = f.get_tensor(key)


def run_length_row(run_dir: Path) -> torch.Tensor | None:
    """The length row a finished run kept beside its export, or None (`append_length_row` refuses that)."""
    path = Path(run_dir) / LENGTH_HEAD_FILE
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as f:
        return f.get_tensor("weight")


def length_outputs_section(names: list[str]) -> str:
    """The card's Outputs section for an export with the length head kept (`names`: its attribute outputs)."""
    rows = "".join(f"| {i} | `{n}` | regression on the `{n}` ratings |\n" for i, n in enumerate(names, 1))
    last = len(names) + 1
    return (
        "## Outputs\n\n| index | `id2label` | what |\n| --- | --- | --- |\n| 0 | `reward` | the reward: the quality "
        f"output, trained to be uncorrelated with length |\n{rows}| {last} | `{LENGTH_LABEL}` | the length head's "
        "output, trained to follow the response's token count: for analysis, not a reward |\n\n"
        f"`logits[:, 0]` is the reward; `logits[:, {last}]` is what training let length explain. Ranking by their "
        "sum reproduces the preference the training data showed, length included. The default export "
        "(`python -m rm export RUN --out DIR`) has the reward alone.\n\n"
    )
