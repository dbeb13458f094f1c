"""The model card's usage snippet, and the example it scores: one of the run's held-out pairs these weights rank
right, or an illustration that says it is one.

The snippet is executed by a test (tests/export/test_card.py), so it cannot rot.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ILLUSTRATION = {
    "hh": ("\n\nHuman: What is 2 plus 3?\n\nAssistant:", " 2 plus 3 is 5.", " 2 plus 3 is 7."),
    "concat": ("What is 2 plus 3? ", "2 plus 3 is 5.", "2 plus 3 is 7."),
}
"""The usage snippet's text when the export has none of the run's held-out pairs, by how training wrote text."""


@dataclass
class Example:
    """A held-out pair of the run that these weights rank right: the card's usage example."""

    prompt: str
    chosen: str
    rejected: str
    rewards: tuple[float, float]
    """(r(chosen), r(rejected)) as rm scored them when exporting."""


def held_out_example(hf: Any, tokenizer: Any, groups: Sequence[Any], candidates: int = 64) -> Example | None:
    """The shortest held-out pair (of the `candidates` shortest among the first 1,024) that these weights rank
    right and whose decoded text tokenizes back to the very ids it was scored on, so the card's snippet gives
    the ranking rm saw. A fixed example ranked wrong on the demo model (" 2 plus 3 is 7." over "5.")."""
    from rm.export.rescore import score_encoded
    from rm.tokens.tokenizer import special_prefix

    first = [groups[i] for i in range(min(len(groups), 1024))]
    pairs = sorted((g for g in first if list(g.rank) == [0, 1]), key=lambda g: len(g.prompt_ids) + len(g.chosen_ids)
                   + len(g.rejected_ids))[:candidates]  # fmt: skip
    if not pairs:
        return None
    scores = score_encoded(hf, pairs, tokenizer.pad_token_id)
    skip = len(special_prefix(tokenizer))
    for g, c, r in zip(pairs, scores["chosen"].tolist(), scores["rejected"].tolist(), strict=True):
        prompt_ids = [int(t) for t in g.prompt_ids[skip:]]
        texts = [tokenizer.decode(ids, clean_up_tokenization_spaces=False) for ids in (prompt_ids, g.chosen_ids,
                 g.rejected_ids)]  # fmt: skip
        same = all(
            tokenizer(texts[0] + t, add_special_tokens=False)["input_ids"] == prompt_ids + [int(x) for x in ids]
            for t, ids in ((texts[1], g.chosen_ids), (texts[2], g.rejected_ids))
        )
        if c > r and same and math.isfinite(c - r):  # inf over -inf is no example of a ranking
            return Example(*texts, (c, r))
    return None


def _example_lines(facts: Any) -> list[str]:
    ex = facts.example
    if ex is not None:
        return [
            f"# A held-out pair of the run: the first answer is the preferred one, and this model ranks it higher "
            f"(rm scored {ex.rewards[0]:.4g} against {ex.rewards[1]:.4g}).",
            f"prompt = {json.dumps(ex.prompt, ensure_ascii=False)}",
            f"responses = [{json.dumps(ex.chosen, ensure_ascii=False)}, {json.dumps(ex.rejected, ensure_ascii=False)}]",
        ]
    prompt, good, bad = ILLUSTRATION["concat" if facts.chat_template == "concat" else "hh"]
    how = "" if facts.chat_template in ("hh", "concat") else " Written as HH text; see 'Tokenization' for this model's."
    end = "  # each response ended as in training: see 'End of sequence'" if facts.eos_text else ""
    return [
        f"# An illustration, not one of the run's pairs: this model may rank it either way.{how}",
        f"prompt = {json.dumps(prompt)}",
        f"responses = [{json.dumps(good + facts.eos_text)}, {json.dumps(bad + facts.eos_text)}]{end}",
    ]


def usage_snippet(facts: Any) -> str:
    """The snippet for `facts`, a `rm.export.card.CardFacts` (typed Any: card imports this module)."""
    where = "this folder (run from inside it)" if facts.model_id == "." else "the Hub repository"
    trust = ", trust_remote_code=True" if facts.remote_code else ""  # see the note under the snippet
    lines = [
        "import torch",
        "from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline",
        "",
        f'model_id = "{facts.model_id}"  # {where}',
        "tokenizer = AutoTokenizer.from_pretrained(model_id)",
        f"model = AutoModelForSequenceClassification.from_pretrained(model_id{trust}).eval()",
        "",
        *_example_lines(facts),
        "# add_special_tokens=True or False: the same ids (the tokenizer adds no BOS/EOS; see 'Tokenization')",
        'batch = tokenizer([prompt + r for r in responses], return_tensors="pt", padding=True)',
        "with torch.no_grad():",
        "    rewards = model(**batch).logits[:, 0]  # one scalar per text, higher is better",
    ]
    if facts.normalization:
        lines += [
            "# see 'Reward normalisation' below (also in model.config.reward_normalization)",
            "rewards = (rewards - model.config.mean) / model.config.std",
        ]
    lines += [
        "print(rewards.tolist())",
        "",
        "# The same raw reward through a pipeline (problem_type is regression: no sigmoid):",
        f'pipe = pipeline("text-classification", model=model_id{trust})',
        "print(pipe(prompt + responses[0]))  # [{'label': 'reward', 'score': ...}]",
    ]
    if facts.chat_template != "mixed":  # mixed formats: no template writes them all, and the export has none
        what = "concatenates the contents, as" if facts.chat_template == "concat" else "writes"
        lines += [
            "",
            f"# Conversations: the chat template {what} the text the model was trained on",
            'messages = [{"role": "user", "content": "What is 2 plus 3?"}, {"role": "assistant", "content": "5."}]',
            "print(pipe(tokenizer.apply_chat_template(messages, tokenize=False)"
            + (f" + {json.dumps(facts.eos_text)}" if facts.eos_text else "")
            + "))",
        ]
    return "\n".join(lines)
