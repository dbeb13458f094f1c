"""Which batch layout a model gets: the shared layout where it reproduces separate forwards, else padded.

Recurrent and hybrid models (state space or convolution layers) take the padded layout without a
probe: their state runs along the row, so packed sequences would leak into each other whatever the
mask. Any other causal decoder is run once at start-up on random pairs in both layouts and the rewards
compared, so an architecture that ignores custom masks or position ids falls back with the reason
logged instead of training on leaked attention. The probe's sequences are longer than the model's
smallest sliding window or attention chunk when that fits in `PROBE_MAX_TOKENS`, so a mask that got the
window wrong is caught; when it does not fit, the reason says so.
"""

from __future__ import annotations

import torch

from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.errors import ConfigError
from rm.model.architecture import recurrent_reason
from rm.model.masks import attention_rules, column_limit
from rm.model.reward import pair_rewards, transformers_model
from rm.tokens.store import EncodedGroup

PROBE_MAX_TOKENS = 256
"""Longest probe sequence: a few pairs this long cost well under a second at start-up, even on CPU."""


def choose_layout(model: torch.nn.Module, requested: str, pad_token_id: int) -> tuple[str, str]:
    """(layout, reason). `auto` takes the shared layout when the model reproduces separate forwards
    with it on a probe batch, and otherwise falls back to padded, saying why."""
    if requested == "padded":
        return "padded", "collator.layout is padded"
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    hf = transformers_model(model.hf)
    checked = ""
    # BERT-like encoders also have a causal-LM class (BertLMHeadModel), so ask for the masked-LM one too.
    if type(hf.config) not in MODEL_FOR_CAUSAL_LM_MAPPING or type(hf.config) in MODEL_FOR_MASKED_LM_MAPPING:
        why_not = f"{hf.config.model_type} is not a causal decoder (its tokens see later tokens)"
    elif why_not := recurrent_reason(hf):
        pass
    else:
        span, checked = probe_span(hf)
        why_not = _probe(model, pad_token_id, span)
        if (limit := column_limit(hf.config)) is not None:
            checked += f"; exact for packed rows of at most {limit} tokens (attention temperature tuning)"
    if not why_not:
        if requested == "packed":  # the same masks and positions as shared, so the same probe decides
            return "packed", f"collator.layout is packed, and the model reproduces separate forwards in it ({checked})"
        return "shared", f"the model reproduces separate forwards in the shared layout ({checked})"
    if requested in ("shared", "packed"):
        raise ConfigError(f"collator.layout={requested} is not possible: {why_not}; use collator.layout=padded")
    return "padded", why_not


def probe_span(hf) -> tuple[int, str]:
    """(tokens the probe's longest sequences must exceed, what that checks, in words)."""
    spans = sorted(r.span for r in attention_rules(hf.config).values() if r.span)
    if not spans:
        return 0, "checked on pairs of up to 12 tokens; every layer attends to the whole sequence"
    limit = min(PROBE_MAX_TOKENS, getattr(hf.config.get_text_config(), "max_position_embeddings", None) or 10**9)
    if spans[0] + 4 > limit:
        return 0, (
            f"its smallest attention window, {spans[0]} tokens, is longer than the probe's sequences can be "
            f"({limit}); the mask applies every layer type's window from the config"
        )
    return spans[0], f"checked on sequences longer than its smallest attention window, {spans[0]} tokens"


@torch.no_grad()
def _probe(model: torch.nn.Module, pad_token_id: int, span: int = 0) -> str:
    """Compare shared-layout rewards with separate forwards on small random pairs, and on pairs longer
    than `span` (prompt and responses across the window's edge) when it is not 0."""
    device = next(model.parameters()).device
    hf = transformers_model(model.hf)
    vocab = hf.get_input_embeddings().num_embeddings
    g = torch.Generator().manual_seed(0)

    def ids(n: int) -> list[int]:
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    pairs = [
        EncodedGroup.pair(ids(5), ids(3), ids(4), 0, index=0),
        EncodedGroup.pair(ids(2), ids(4), ids(1), 0, index=1),
    ]
    if span:  # a long prompt, long responses, and both across the edge of the window
        h = span // 2
        shapes = [(span - 2, 3, 5), (h + 1, h + 2, h + 3), (2, span + 2, span - 1)]
        pairs += [EncodedGroup.pair(ids(p), ids(c), ids(r), 0, index=2 + i) for i, (p, c, r) in enumerate(shapes)]

    def rewards(collate) -> tuple[torch.Tensor, torch.Tensor]:
        return pair_rewards(model, {k: v.to(device) for k, v in collate(pairs).items()})

    was_training = model.training
    model.eval()
    try:
        pc, pr = rewards(PaddedCollator(pad_token_id))  # a model that fails here fails training too: raise
        try:
            sc, sr = rewards(SharedCollator(pad_token_id))
        except Exception as e:  # an architecture that rejects custom masks or position ids
            first = (str(e).splitlines() or [""])[0]
            return f"{type(hf).__name__} rejected the shared layout ({type(e).__name__}: {first})"
    finally:
        model.train(was_training)
    got, want = torch.cat([sc, sr]), torch.cat([pc, pr])
    tol = 1e-4 if hf.dtype == torch.float32 else 3e-2
    err = (got - want).abs().max().item()
    if not err <= tol * (1 + want.abs().max().item()):
        return f"{type(hf).__name__} gives different rewards in the shared layout (max diff {err:.2e})"
    return ""
