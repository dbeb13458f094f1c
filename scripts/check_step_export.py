"""Does a process-reward export load in another transformers as token classification, with rm's probabilities?

    .venv/bin/python scripts/check_step_export.py --python /work/venvs/tf451/bin/python [--out DIR] [--arch A ...]

In rm's venv, for each architecture (llama, qwen2, gpt_neox, gemma by default), it builds a tiny random reward model
(hidden 32, 2 layers, a BPE of 100 tokens) with a random score row, exports it with
`rm.export.steps.token_export` to DIR/ARCH, and records in DIR/ARCH.expected.json the right-padded batch its
exported tokenizer makes of three multi-step solutions and sigmoid(r_t) at every attended position from rm's own
forward (`RewardModel(hf)(..., reward_index=...)`). Then `--python`, a venv with another transformers, runs this
file with `--read`, which imports torch and transformers only: it loads the folder with `AutoTokenizer` and
`AutoModelForTokenClassification`, checks that the tokenizer gives the same ids and that every weight is loaded
(none missing, unexpected or mismatched), and compares softmax(logits)[..., 1] at those positions. Prints a row per
architecture (the other side's transformers version, the classes it loaded, the largest difference) and exits 1
where one is over 1e-6 or fails. Seconds on a CPU. The other venv, torch pinned first as in the Makefile:

    python3 -m venv /work/venvs/tf451
    /work/venvs/tf451/bin/pip install torch==2.13.0
    /work/venvs/tf451/bin/pip install transformers==4.51.3 safetensors
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TOLERANCE = 1e-6
SEPARATOR = "\n\n"
SOLUTIONS = [
    "Add 3 and 4.\n\nStep one: 3 + 4 = 7.\n\nStep two: so the answer is 7.\n\n",
    "Halve 10.\n\nStep one: 10 / 2 = 6.\n\n",
    "Double 2, then add 1.\n\nStep one: 2 * 2 = 4.\n\nStep two: 4 + 1 = 5.\n\nStep three: it is 5.\n\n",
]
"""Solutions of different lengths, so that the batch is right-padded; steps end with SEPARATOR."""


def export_one(model_type: str, out: Path) -> dict:
    """Export a tiny random model of `model_type` to `out`; what the other side must reproduce."""
    import torch
    from transformers import AutoTokenizer

    from rm.config import ModelConfig, RandomInitConfig, RunConfig
    from rm.export.folder import ExportOptions, Weights, export_model
    from rm.model.build import build_model
    from rm.model.reward import RewardModel
    from rm.tokens.tokenizer import train_bpe

    tokenizer = train_bpe(SOLUTIONS * 20, vocab_size=100)
    torch.manual_seed(0)
    shape = RandomInitConfig(
        model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    hf = build_model(ModelConfig(random_init=shape), len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    with torch.no_grad():
        hf.score.weight.normal_(0.0, 1.0)  # far from its small initial values: a wrong row or sign shows
    hf.eval()
    cfg = RunConfig(output_dir=str(out.parent / f"{model_type}-run"))
    options = ExportOptions(overwrite=True, step_separator=SEPARATOR)
    export_model(hf, tokenizer, out, cfg, Weights(None, None), options=options)

    batch = AutoTokenizer.from_pretrained(out)(SOLUTIONS, return_tensors="pt", padding=True)
    mask = batch["attention_mask"]
    index = mask.reshape(-1).nonzero().squeeze(-1)  # every attended position, flat (row * T + column)
    with torch.no_grad():
        expected = RewardModel(hf)(batch["input_ids"], mask, reward_index=index).sigmoid()
    return {
        "input_ids": batch["input_ids"].tolist(),
        "attention_mask": mask.tolist(),
        "index": index.tolist(),
        "expected": expected.double().tolist(),
    }


def read(folder: Path, expected_file: Path) -> dict:
    """The other side (torch and transformers only): load the folder, tokenize, compare."""
    import torch
    import transformers
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    want = json.loads(expected_file.read_text())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(SOLUTIONS, return_tensors="pt", padding=True)
    same_ids = (
        batch["input_ids"].tolist() == want["input_ids"] and batch["attention_mask"].tolist() == want["attention_mask"]
    )
    model, info = AutoModelForTokenClassification.from_pretrained(folder, output_loading_info=True)
    model.eval()
    ids, mask = torch.tensor(want["input_ids"]), torch.tensor(want["attention_mask"])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits  # [rows, T, 2]
    got = logits.float().softmax(-1)[..., 1].reshape(-1)[torch.tensor(want["index"])]
    diff = (got.double() - torch.tensor(want["expected"], dtype=torch.float64)).abs().max().item()
    return {
        "transformers": transformers.__version__,
        "class": type(model).__name__,
        "tokenizer": type(tokenizer).__name__,
        "same_ids": same_ids,
        "not_loaded": sorted(set(info["missing_keys"]) | set(info["unexpected_keys"]) | set(info["mismatched_keys"])),
        "positions": len(want["index"]),
        "max_abs_diff": diff,
        "labels": model.config.id2label,
        "separator": getattr(model.config, "rm_step_separator", None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", help="the other venv's python (e.g. /work/venvs/tf451/bin/python)")
    parser.add_argument("--out", type=Path, help="folder for the exports (default: a temporary one)")
    parser.add_argument("--arch", nargs="+", default=["llama", "qwen2", "gpt_neox", "gemma"])
    parser.add_argument("--read", nargs=2, type=Path, metavar=("FOLDER", "EXPECTED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read:  # in the other venv
        print(json.dumps(read(*args.read)))
        return 0
    if not args.python:
        parser.error("--python is required")
    out = args.out or Path(tempfile.mkdtemp(prefix="rm-step-export-"))
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    print(f"exports in {out}")
    for arch in args.arch:
        folder, expected = out / arch, out / f"{arch}.expected.json"
        expected.write_text(json.dumps(export_one(arch, folder)))
        run = subprocess.run(
            [args.python, __file__, "--read", str(folder), str(expected)], capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            failed = True
            print(f"{arch:10s} FAILED to load:\n{run.stderr[-2000:]}")
            continue
        r = json.loads(run.stdout.strip().splitlines()[-1])
        ok = r["same_ids"] and not r["not_loaded"] and r["max_abs_diff"] <= TOLERANCE and r["separator"] == SEPARATOR
        failed |= not ok
        print(
            f"{arch:10s} transformers {r['transformers']}: {r['class']} ({r['tokenizer']}), same ids {r['same_ids']}, "
            f"{len(r['not_loaded'])} weights not loaded, "
            f"{r['positions']} positions, max |P - sigmoid(r)| = {r['max_abs_diff']:.3g}  {'ok' if ok else 'FAIL'}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
