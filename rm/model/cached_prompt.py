"""Rollout groups scored on their prompt's key/value cache: each prompt computed once, each response attending to
its prompt and itself only.

The shared layout (rm/collate/scoring.py) computes a group's prompt once too, but as one packed row
[prompt | response 1 | … | response K] under a dense [T, T] mask: every response pays attention over the whole
row, and rows are padded to the widest group of the batch. Here a batch runs in two steps:
1. the batch's distinct prompts, in chunks of similar length, keeping each layer's keys and values;
2. the responses, in chunks of similar length, each on a cache holding its own prompt's keys and values
   (zero columns masked out where its prompt is shorter than the chunk's longest), at positions that continue
   its prompt's.
So attention costs P² + Σ R·(P + R) instead of (P + ΣR)², and padding stays
within `rm.collate.token_budget.SLACK` of the tokens.
Measured on rm serve's load benchmark (README): the reason /score_groups reaches its token ceiling. It is
the cached-prompt one of rm's reward forwards (rm/model/reward.py lists them all, one per layout); rm serve
(rm/serve/scorer.py) uses it for runs of responses to one prompt.

This is exact only where attention is plain causal attention over positions: every layer full attention (no
sliding window, no chunks, no attention temperature by column), and the backbone takes a 4D mask, position ids
and a cache. `prefix_support` checks the config and then runs a probe against the shared layout, as
rm/model/probe.py does for training's layouts; a model that fails keeps the shared layout.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import nn
from transformers import DynamicCache

from rm.collate.scoring import PackedScoring, scored
from rm.collate.token_budget import chunks
from rm.model.masks import AttentionRule, additive_mask, attention_rules, column_limit
from rm.model.reward import RewardModel, mixed_reward, score_head, transformers_model
from rm.tokens.store import EncodedGroup


@functools.cache
def cache_argument(cls: type) -> str:
    """The backbone's name for the key/value cache: `cache` in transformers >= 5.2x, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


class PrefixScoring:
    """Rewards of a batch of groups (one prompt, its responses), in the two steps of the module doc: the
    backbone and the score head of `RewardModel`, run on a prompt's cache instead of a packed row."""

    def __init__(self, model: RewardModel, device: torch.device):
        self.model = model
        self.hf = transformers_model(model.hf)
        self.backbone = self.hf.base_model
        self.head = score_head(model.hf)
        self.device = device
        self.additive = self.hf.config._attn_implementation == "eager"

    def rewards(self, groups: list[EncodedGroup]) -> torch.Tensor:
        """One row per response, group after group: [n] rewards (or [n, 1 + A] with attribute outputs, column 0 the
        reward, mixed from the attributes where the model is marked so: rm/model/reward.py:mixed_reward)."""
        prompts = [[int(t) for t in g.prompt_ids] for g in groups]
        if not all(prompts):
            raise ValueError("every prompt must have a token: an empty one has nothing to cache")
        group_of = torch.tensor([k for k, g in enumerate(groups) for _ in g.response_ids], dtype=torch.long)
        keys, values = self._prompts(prompts)
        prompt_len = torch.tensor([len(p) for p in prompts])
        responses = [[int(t) for t in r] for g in groups for r in g.response_ids]
        out: torch.Tensor | None = None
        for idx in chunks([len(r) for r in responses]):
            got = self._responses([responses[i] for i in idx], group_of[idx], prompt_len, keys, values)
            if out is None:
                out = got.new_empty((len(responses), *got.shape[1:]))
            out[torch.tensor(idx)] = got
        assert out is not None
        return mixed_reward(out, getattr(self.hf, "rm_reward_mix", None))  # as RewardModel's forward returns it

    def _prompts(self, prompts: list[list[int]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each layer's keys and values of every prompt, [prompts, kv heads, longest, head dim], zero past a
        prompt's end (those columns are masked when responses attend)."""
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        longest = max(len(p) for p in prompts)
        for idx in chunks([len(p) for p in prompts]):
            width = max(len(prompts[i]) for i in idx)
            ids = torch.zeros(len(idx), width, dtype=torch.long)
            real = torch.zeros(len(idx), width, dtype=torch.bool)
            for row, i in enumerate(idx):
                ids[row, : len(prompts[i])] = torch.tensor(prompts[i])
                real[row, : len(prompts[i])] = True
            causal = torch.ones(width, width, dtype=torch.bool).tril()
            eye = torch.eye(width, dtype=torch.bool)  # a padding query sees itself at least: no empty row
            mask = causal & (real[:, None, :] | eye)
            positions = torch.arange(width).expand(len(idx), width)
            _, cache = self._forward(ids, mask, positions, None)
            rows = torch.tensor(idx, device=self.device)
            for layer, (k, v) in enumerate(cache_tensors(cache)):
                if len(keys) <= layer:
                    shape = (len(prompts), k.shape[1], longest, k.shape[3])
                    keys.append(k.new_zeros(shape))
                    values.append(v.new_zeros(shape))
                keep = real.to(self.device)[:, None, :, None]
                keys[layer][rows, :, :width] = k * keep
                values[layer][rows, :, :width] = v * keep
        return keys, values

    def _responses(
        self,
        responses: list[list[int]],
        groups: torch.Tensor,
        prompt_len: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
    ) -> torch.Tensor:
        """The head's outputs at each response's last token, [n, outputs], its prompt read from the cache."""
        width = max(len(r) for r in responses)
        lengths = prompt_len[groups]  # [n]
        cached = int(lengths.max())
        ids = torch.zeros(len(responses), width, dtype=torch.long)
        for row, r in enumerate(responses):
            ids[row, : len(r)] = torch.tensor(r)
        seen = (torch.arange(cached)[None, :] < lengths[:, None])[:, None, :].expand(-1, width, -1)
        causal = torch.ones(width, width, dtype=torch.bool).tril().expand(len(responses), -1, -1)
        mask = torch.cat([seen, causal], dim=2)  # [n, width, cached + width]
        positions = lengths[:, None] + torch.arange(width)[None, :]
        cache = DynamicCache()
        rows = groups.to(self.device)
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            cache.update(k[rows, :, :cached], v[rows, :, :cached], layer)
        hidden, _ = self._forward(ids, mask, positions, cache)  # [n, width, H]
        last = torch.tensor([len(r) - 1 for r in responses], device=self.device)
        picked = hidden[torch.arange(len(responses), device=self.device), last]
        return self.head(picked).float()

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: DynamicCache | None
    ) -> tuple[torch.Tensor, object]:
        """(last hidden states, the cache) of the backbone on `ids` with a boolean [rows, q, k] mask (additive for
        eager attention)."""
        mask = mask[:, None].to(self.device)
        if self.additive:
            mask = additive_mask(mask, self.hf.dtype)
        name = cache_argument(type(self.backbone))
        out = self.backbone(
            input_ids=ids.to(self.device),
            attention_mask=mask,
            position_ids=positions.to(self.device),
            use_cache=True,
            **{name: cache},
        )
        return out.last_hidden_state, getattr(out, "cache", None) or getattr(out, "past_key_values", None)


def cache_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) of every layer, [rows, kv heads, tokens, head dim], from a transformers cache."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return [(cache.key_cache[i], cache.value_cache[i]) for i in range(len(cache.key_cache))]  # older caches


def prefix_support(model: nn.Module, pad_token_id: int, device: torch.device) -> tuple[PrefixScoring | None, str]:
    """(the prefix scorer, why) where the model gives the shared layout's rewards this way; (None, why not) else."""
    if not isinstance(model, RewardModel):
        return None, "not a decoder reward model"
    hf = transformers_model(model.hf)
    try:
        plain = attention_rules(hf.config) == {None: AttentionRule()}
    except ValueError as e:
        return None, str(e)
    if not plain or column_limit(hf.config) is not None:
        return None, "its attention has windows, chunks or column-dependent scaling"
    if hf.config._attn_implementation not in ("sdpa", "eager"):
        return None, f"attention implementation {hf.config._attn_implementation}"
    scorer = PrefixScoring(model, device)
    return (scorer, "") if not (why := probe(scorer, pad_token_id)) else (None, why)


@torch.inference_mode()
def probe(scorer: PrefixScoring, pad_token_id: int) -> str:
    """'' where two random groups (and a lone text) get the shared layout's rewards (1e-4), else why not."""
    vocab = scorer.hf.get_input_embeddings().num_embeddings
    g = torch.Generator().manual_seed(0)

    def ids(n: int) -> list[int]:
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    p1, p2, p3 = ids(7), ids(3), ids(5)
    groups = [scored(p1, [ids(4), ids(1), ids(9)]), scored(p2, [ids(6), ids(2)]), scored(p3, [ids(3)])]
    packed = PackedScoring(pad_token_id)
    batch = {k: v.to(scorer.device) for k, v in packed.collate(groups).items()}
    want = packed.rewards(scorer.model, batch)
    try:
        got = scorer.rewards(groups)
    except Exception as e:  # noqa: BLE001 - an architecture that rejects a 4D mask or a cache keeps the shared layout
        first = (str(e).splitlines() or [""])[0]
        return f"{type(scorer.hf).__name__} rejected a cached prompt ({type(e).__name__}: {first})"
    tol = 1e-4 if scorer.hf.dtype == torch.float32 else 3e-2
    err = (got - want).abs().max().item()
    if not err <= tol * (1 + want.abs().max().item()):
        return f"{type(scorer.hf).__name__} gives other rewards on a cached prompt (max diff {err:.2e})"
    return ""
