"""Process-reward exports for the scoring tests, and the step probabilities plain transformers reads from them.

An export is a tiny model with a random score row (steps read 0.8 or so, a few hundredths apart), written
as `rm export` writes a process reward model (`export_model` with a step separator: the architecture's token
classifier, rm/export/steps/token_export.py). The reference
is `AutoModelForTokenClassification`'s softmax[..., 1] at each step's last token, on ids built here from the rule
the step tokenizer documents (the prompt + separator, then each step + separator tokenized alone), one solution a
row: no rm layout, batching or fitting on that path.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForTokenClassification

from conftest import tiny_model
from rm.config import RunConfig
from rm.export.folder import ExportOptions, Weights, export_model
from rm.tokens.tokenizer import special_prefix

SEPARATOR = " ки\n"
"""Not the default separator, so a reader that ignores the model's own shows."""
PROBLEM = {
    "prompt": "What is 3 + 4?",
    "solutions": [["3 + 4 = 7", "so the answer is 7"], ["3 + 4 = 8", "because", "8"]],
}
ONE = {"prompt": "Name a prime.", "completions": ["2 is prime", "done"], "labels": [True, False]}


def prm_export(tokenizer, out: Path, *, model_type: str = "llama", separator: str = SEPARATOR, seed: int = 3) -> Path:
    """A tiny process-reward export at `out` (its run config's output_dir beside it)."""
    hf = tiny_model(tokenizer, model_type)
    torch.manual_seed(seed)
    with torch.no_grad():
        hf.score.weight.normal_(0.0, 0.3)
    cfg = RunConfig(output_dir=str(out.parent / "run"))
    return export_model(hf, tokenizer, out, cfg, Weights(None, None), options=ExportOptions(step_separator=separator))


def plain_step_probabilities(folder: Path, tokenizer, problem: dict, separator: str = SEPARATOR) -> list:
    """softmax[..., 1] of the exported token classifier at every step's last token, per solution (a `completions`
    problem: its one list), each solution alone in a row of its own."""
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    solutions = problem["solutions"] if "solutions" in problem else [problem["completions"]]

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    out = []
    for steps in solutions:
        row, ends = list(special_prefix(tokenizer)) + ids(problem["prompt"] + separator), []
        for step in steps:
            row += ids(step + separator)
            ends.append(len(row) - 1)
        with torch.no_grad():
            probabilities = model(input_ids=torch.tensor([row])).logits[0].softmax(-1)[:, 1]
        out.append(probabilities[ends].tolist())
    return out if "solutions" in problem else out[0]


def flat(values) -> list:
    """Nested step scores as one flat list."""
    return [x for v in values for x in (flat(v) if isinstance(v, list) else [v])]
