"""The attribute heads' acceptance check: they learn known functions of the text without costing preference accuracy.

    python scripts/check_attributes.py [--out DIR] [--prompts N] [--steps N] [--seed N]

It writes a fixture in HelpSteer2's published field names (`prompt`, `response`, `helpfulness`, `correctness`,
`coherence`, `complexity`, `verbosity`; one row per response, four responses per prompt: rm reads this layout as
groups) where every rating is a known function of the text:

- correctness (0/1, binary): whether the response's last word is the right sum of the question's two digits;
- verbosity (0-4, ordinal): the response's length bucket, `well` said 0-9 times before the answer (n // 2);
- helpfulness (0-4, ordinal): 3 * correctness + (verbosity >= 2), the mix the preference order follows;
- coherence (4) and complexity (the question's larger digit, 0-4) are written but not trained on.

Then it trains the same tiny random Llama twice on the CPU, on the same data, steps and seed: once with
`model.head.attributes=[helpfulness, correctness, verbosity]` and once reward-only. Each run's final eval is on
the prompts it held out (data.split_version 2: a prompt's rows are all on one side). It prints per attribute the
held-out Spearman (ordinal) or AUC (binary) and both runs' preference accuracy with 2 standard errors, and exits
1 where a target is missed: Spearman > 0.8 for each ordinal attribute, AUC > 0.9 for each binary one,
and the attribute run's preference accuracy not below the reward-only run's by more than 2 SE of the difference.
About 4 minutes on 2 CPU cores (two runs of under 2 minutes each: 800 steps of 16 prompts, 3000 prompts).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path

ATTRIBUTES = ["helpfulness", "correctness", "verbosity"]
BINARY = {"correctness"}
MAX_DIGIT = 4
"""Questions add two digits 0..4: 25 sums a tiny model learns in a few hundred steps."""


def response_row(prompt: str, a: int, b: int, answer: int, n_words: int) -> dict:
    """One HelpSteer2-style row whose ratings are the module docstring's functions of its text."""
    correct = int(answer == a + b)
    verbosity = n_words // 2
    return {
        "prompt": prompt,
        "response": " ".join(["well"] * n_words + [f"it is {answer}"]),
        "helpfulness": 3 * correct + int(verbosity >= 2),
        "correctness": correct,
        "coherence": 4,
        "complexity": max(a, b),
        "verbosity": verbosity,
    }


def tag(i: int) -> str:
    """A distinct three-letter name for prompt i (17576 of them)."""
    return "".join(chr(97 + (i // 26**k) % 26) for k in range(3))


def make_rows(n_prompts: int, seed: int) -> list[dict]:
    """Four responses per prompt, two right and two wrong answers, each with its own length; distinct texts."""
    rng = random.Random(seed)
    rows = []
    for i in range(n_prompts):
        a, b = rng.randint(0, MAX_DIGIT), rng.randint(0, MAX_DIGIT)
        prompt = f"[{tag(i)}] what is {a} + {b}?"  # a tag of letters, not digits: distinct prompts, one group each
        wrong = rng.sample([s for s in range(2 * MAX_DIGIT + 1) if s != a + b], 2)
        lengths = rng.sample(range(10), 4)
        for answer, n_words in zip([a + b, a + b, *wrong], lengths, strict=True):
            rows.append(response_row(prompt, a, b, answer, n_words))
    return rows


def write_rows(path: Path, n_prompts: int, seed: int) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in make_rows(n_prompts, seed)))
    return path


def overrides(data: Path, out: Path, steps: int, seed: int, attributes: bool) -> list[str]:
    """The run's settings: a two-layer model of width 96, a 300-token BPE, no checkpoints, no export."""
    head = [f"model.head.attributes=[{', '.join(ATTRIBUTES)}]"] if attributes else []
    return [
        f"data.source={data}", "data.eval_split=", "data.eval_fraction=0.2", "data.cache=false",
        "model.random_init.hidden_size=96", "model.random_init.intermediate_size=192",
        "model.random_init.num_hidden_layers=2", "model.random_init.num_attention_heads=4",
        "model.random_init.max_position_embeddings=64", "tokenizer.vocab_size=300", "collator.max_length=64",
        "train.batch_size=16", f"train.max_steps={steps}", "train.lr=3e-3", "train.warmup_ratio=0.05",
        "train.eval_steps=0", "train.save_steps=0", "train.report_to=[]", "train.num_threads=1",
        f"train.seed={seed}", "export.enabled=false", f"output_dir={out}", *head,
    ]  # fmt: skip


def train(data: Path, out: Path, steps: int, seed: int, attributes: bool) -> dict:
    """The run's final eval.json (held-out prompts)."""
    from rm.config import load_config
    from rm.training.run import main

    main(load_config(None, overrides(data, out, steps, seed, attributes)))
    return json.loads((out / "eval.json").read_text())


def accuracy(result: dict) -> tuple[float, int]:
    """(held-out preference accuracy, ordered pairs it is over)."""
    overall = result["overall"]
    return float(overall["accuracy"]), int(overall["n"])


def standard_error(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n) if n else float("nan")


def verdict(with_attributes: dict, reward_only: dict) -> tuple[list[str], bool]:
    """The printed table and whether every target is met."""
    lines, ok = [f"{'attribute':<12} {'metric':<9} {'held-out':>8}  target  n", "-" * 48], True
    for name in ATTRIBUTES:
        block = with_attributes["attributes"][name]["overall"]
        metric = "auc" if name in BINARY else "spearman"
        target = 0.9 if name in BINARY else 0.8
        value = block.get(metric)
        met = value is not None and value > target
        ok &= met
        lines.append(f"{name:<12} {metric:<9} {value:>8.4f}  > {target}  {block['n']}  {'ok' if met else 'MISSED'}")
    (p1, n1), (p0, n0) = accuracy(with_attributes), accuracy(reward_only)
    se1, se0 = standard_error(p1, n1), standard_error(p0, n0)
    se_diff = math.sqrt(se1**2 + se0**2)
    met = p1 >= p0 - 2 * se_diff
    ok &= met
    lines += [
        "",
        f"preference accuracy, attributes:  {p1:.4f} +- {2 * se1:.4f} (2 SE, {n1} held-out pairs)",
        f"preference accuracy, reward-only: {p0:.4f} +- {2 * se0:.4f} (2 SE, {n0} held-out pairs)",
        f"difference {p1 - p0:+.4f}, 2 SE of it {2 * se_diff:.4f}: {'ok' if met else 'MISSED'} (not worse beyond 2 SE)",
    ]
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where the data and runs go (default: a temp dir)")
    parser.add_argument("--prompts", type=int, default=3000, help="prompts of four responses each (0.2 held out)")
    parser.add_argument("--steps", type=int, default=800, help="optimizer steps of each run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = args.out or Path(tempfile.mkdtemp(prefix="check_attributes_"))
    root.mkdir(parents=True, exist_ok=True)
    data = write_rows(root / "helpsteer2_like.jsonl", args.prompts, args.seed)
    results, seconds = {}, {}
    for attributes in (True, False):
        name = "attributes" if attributes else "reward_only"
        start = time.monotonic()
        results[name] = train(data, root / name, args.steps, args.seed, attributes)
        seconds[name] = time.monotonic() - start
    lines, ok = verdict(results["attributes"], results["reward_only"])
    print("\n".join(lines))
    print(f"\n{args.prompts} prompts x 4 responses, {args.steps} steps per run "
          f"({seconds['attributes']:.0f} s and {seconds['reward_only']:.0f} s); runs in {root}")  # fmt: skip
    print("all targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
