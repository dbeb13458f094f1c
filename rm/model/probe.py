"""Which batch layout a model gets: the shared layout where it reproduces separate forwards, else padded.

The probe runs the model once at start-up on small random pairs in both layouts and compares the
rewards, so an architecture that ignores custom masks or position ids falls back with the reason logged
instead of training on leaked attention.
"""

from __future__ import annotations

import torch

from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.data.encode import EncodedPair
from rm.model.reward import pair_rewards


def choose_layout(model: torch.nn.Module, requested: str, pad_token_id: int) -> tuple[str, str]:
    """(layout, reason). `auto` takes the shared layout when the model reproduces separate forwards
    with it on a probe batch, and otherwise falls back to padded, saying why."""
    if requested == "padded":
        return "padded", "collator.layout is padded"
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    hf = model.hf
    why_not = ""
    # BERT-like encoders also have a causal-LM class (BertLMHeadModel), so ask for the masked-LM one too.
    if type(hf.config) not in MODEL_FOR_CAUSAL_LM_MAPPING or type(hf.config) in MODEL_FOR_MASKED_LM_MAPPING:
        why_not = f"{hf.config.model_type} is not a causal decoder (its tokens see later tokens)"
    else:
        why_not = _probe(model, pad_token_id)
    if not why_not:
        if requested == "packed":  # the same masks and positions as shared, so the same probe decides
            return "packed", "collator.layout is packed, and the model reproduces separate forwards in it"
        return "shared", "the model reproduces separate forwards in the shared layout"
    if requested in ("shared", "packed"):
        raise ValueError(f"collator.layout={requested} is not possible: {why_not}; use collator.layout=padded")
    return "padded", why_not


@torch.no_grad()
def _probe(model: torch.nn.Module, pad_token_id: int) -> str:
    """Compare shared-layout rewards with separate forwards on two small random pairs."""
    device = next(model.parameters()).device
    vocab = model.hf.get_input_embeddings().num_embeddings
    g = torch.Generator().manual_seed(0)

    def ids(n: int) -> list[int]:
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    pairs = [EncodedPair(ids(5), ids(3), ids(4), 0, index=0), EncodedPair(ids(2), ids(4), ids(1), 0, index=1)]
    was_training = model.training
    model.eval()
    try:
        batches = [c(pairs) for c in (SharedCollator(pad_token_id), PaddedCollator(pad_token_id))]
        (sc, sr), (pc, pr) = [
            pair_rewards(model, {k: v.to(device) for k, v in b.items()}) for b in batches
        ]  # fmt: skip
    except Exception as e:  # an architecture that rejects custom masks or position ids
        return f"{type(model.hf).__name__} rejected the shared layout ({type(e).__name__}: {e})"
    finally:
        model.train(was_training)
    got, want = torch.cat([sc, sr]), torch.cat([pc, pr])
    tol = 1e-4 if model.hf.dtype == torch.float32 else 3e-2
    err = (got - want).abs().max().item()
    if not err <= tol * (1 + want.abs().max().item()):
        return f"{type(model.hf).__name__} gives different rewards in the shared layout (max diff {err:.2e})"
    return ""
