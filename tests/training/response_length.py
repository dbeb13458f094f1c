"""Each response's token length as a label, and how much the reward follows it ("Adding a label" in the docs)."""

import torch

from rm.api import Label, Metric, register_label, register_metric


def token_lengths(prompt_ids, response_ids):
    return [len(r) for r in response_ids]  # the ids as fitted into collator.max_length: what was trained on


def length_correlation(gathered, subsets):
    """Pearson correlation of reward with token length over every eval response: near 1, length buys reward."""
    x, y = gathered["response_tokens"].double(), gathered["reward"].double()
    r = torch.corrcoef(torch.stack([x, y]))[0, 1].item() if len(x) > 1 else float("nan")
    return {"pearson": r, "responses": len(x)}


RESPONSE_TOKENS = Label(name="response_tokens", level="response", fields="token count", derive=token_lengths)
LENGTH_CORRELATION = Metric(name="length_correlation", reads=("response_tokens",), block=length_correlation)
register_label(RESPONSE_TOKENS)
register_metric(LENGTH_CORRELATION)
