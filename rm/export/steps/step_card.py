"""The model card of a process reward model: what the folder is, how to read a step's probability, and the rule
that splits a solution into steps (rm/tokens/steps/step_tokens.py), with the separator it was trained with."""

from __future__ import annotations

from rm.config import RunConfig
from rm.export.card import CardFacts, eval_section, front_matter, training_section, weights_line


def step_usage(facts: CardFacts) -> str:
    """A snippet that scores every step of two solutions with plain transformers, by the training rule."""
    where = "this folder (run from inside it)" if facts.model_id == "." else "the Hub repository"
    return "\n".join([
        "import torch",
        "from transformers import AutoModelForTokenClassification, AutoTokenizer",
        "",
        f'model_id = "{facts.model_id}"  # {where}',
        "tokenizer = AutoTokenizer.from_pretrained(model_id)",
        "model = AutoModelForTokenClassification.from_pretrained(model_id).eval()",
        "separator = model.config.rm_step_separator  # the text after the problem and after every step",
        "",
        'problem = "Tom has 3 apples and buys 4 more. How many apples does he have?"',
        'solutions = [["3 + 4 = 7.", "He has 7 apples."], ["3 + 4 = 8.", "He has 8 apples."]]',
        "# the special tokens the tokenizer puts before a text (a BOS), then each piece tokenized alone",
        'full, plain = tokenizer("a")["input_ids"], tokenizer("a", add_special_tokens=False)["input_ids"]',
        "prefix = full[: len(full) - len(plain)] if full[len(full) - len(plain) :] == plain else []",
        "for steps in solutions:",
        "    pieces = [problem + separator] + [step + separator for step in steps]",
        '    ids = tokenizer(pieces, add_special_tokens=False)["input_ids"]',
        "    tokens, ends = list(prefix) + ids[0], []",
        "    for piece in ids[1:]:",
        "        tokens += piece",
        "        ends.append(len(tokens) - 1)  # a step's score is read at its piece's last token",
        "    with torch.no_grad():",
        "        logits = model(input_ids=torch.tensor([tokens])).logits[0]  # [tokens, 2]",
        "    print(logits.softmax(-1)[ends, 1].tolist())  # P(step is correct), one per step",
    ])  # fmt: skip


def step_eval_section(result: dict | None) -> str:
    """The held-out step numbers (eval.json's `steps` block, rm/evaluation/steps/step_report.py) as a table."""
    steps = (result or {}).get("steps")
    if not steps:
        return ""

    def row(name: str, m: dict) -> str:
        f1 = (m["first_error"] or {}).get("f1")
        best = m["best_of_n"]["min"]
        cells = [m["step_accuracy"], m["step_auc"], f1, best["accuracy"], best["oracle"], best["chance"]]
        shown = " | ".join("n/a" if v is None else f"{v:.4f}" for v in cells)
        return f"| {name} | {m['n_solutions']} | {m['n_steps']} | {shown} |"

    lines = [
        "## Step evaluation\n",
        "Held-out solutions, every step judged correct at probability >= 0.5. First-error F1 is ProcessBench's: the "
        "harmonic mean of the accuracies on solutions with a wrong step (the first one found) and on correct ones. "
        "Best-of-N picks each problem's solution of highest minimum step probability (problems of two or more "
        "solutions); the oracle picks a correct one wherever there is one, chance picks at random.\n",
        "| subset | solutions | steps | step accuracy | step AUC | first-error F1 | best-of-N (min) | oracle "
        "| chance |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(row(name, m) for name, m in steps["subsets"].items()),
        row("**overall**", steps["overall"]),
    ]
    return "\n".join(lines) + "\n\n"


def render_step_card(cfg: RunConfig, facts: CardFacts) -> str:
    """README.md of a process reward model's export."""
    separator = repr(facts.step_separator)
    intro = (
        "A process reward model: `AutoModelForTokenClassification` with two labels, 0 `wrong` and 1 `correct`. At "
        "the last token of each step of a solution, `softmax(logits)[1]` is the probability that the step is "
        f"correct (label 0's logit is 0, so it equals `sigmoid(logits[1])`). This folder holds {weights_line(facts)}."
    )
    rule = (
        "## Reading steps\n\n"
        f"Training wrote a problem followed by the separator {separator} (config.json's `rm_step_separator`), then "
        "each step followed by it, and tokenized each of these pieces alone, without special tokens, after the "
        "tokenizer's own prefix (a BOS where it adds one). A step is scored at the last token of its piece: the "
        "separator's. Score a solution the same way (the snippet above): a whole-text tokenization can merge a step's "
        "last characters with the next step's first, and then no token ends the step. Solutions longer than "
        f"{facts.max_length or 'the trained length'} tokens were trained on their leading steps that fit.\n"
    )
    return (
        f"---\n{front_matter(cfg, facts)}\n---\n\n# Process reward model ({facts.architecture})\n\n{intro}\n\n"
        f"{step_eval_section(facts.eval_result)}{eval_section(cfg, facts.eval_result, facts.eval_origin)}\n"
        f"## Usage\n\n```python\n{step_usage(facts)}\n```\n\n{rule}\n{training_section(cfg, facts)}"
    )
