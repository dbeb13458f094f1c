"""Masks that respect the model: sliding windows and chunks in the shared layout, and a probe that looks past them.

The case that broke: a tiny Mistral with `sliding_window=16` on pairs of 9-45 tokens. rm's old mask (the
packing rule alone) replaced the model's window, and the old probe (pairs of at most 9 tokens) never
saw the difference. Each check's batch holds a group of three responses beside the pairs: every
response's reward, under every layer's window or chunk, equals its own separate forward.
"""

import pytest
import torch
from test_architectures import PACK, separate, shares_rows, window_batch

from rm.collate.pack import SharedCollator
from rm.config import ModelConfig, RandomInitConfig
from rm.model import masks
from rm.model.build import build_model
from rm.model.probe import PROBE_MAX_TOKENS, choose_layout
from rm.model.reward import RewardModel, group_rewards

OLD_MASK = {None: masks.AttentionRule()}  # the packing rule alone, as before windows were kept


def tiny(tokenizer, model_type: str, **extra) -> RewardModel:
    shape = RandomInitConfig(
        model_type=model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    shape.config = extra
    torch.manual_seed(0)
    hf = build_model(ModelConfig(random_init=shape), len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    return RewardModel(hf).eval()


def shared_error(model: RewardModel, tokenizer, seed: int = 3) -> float:
    """The largest difference, over every response of 8 pairs and a group of three sharing rows, between the
    shared layout's reward and the response's separate forward."""
    groups = window_batch(len(tokenizer), 8, seed)
    batch = SharedCollator(tokenizer.pad_token_id, pack_length=PACK)(groups)
    assert shares_rows(batch, groups)
    with torch.no_grad():
        return (group_rewards(model, batch) - separate(model, groups)).abs().max().item()


def test_the_window_rule_on_positions():
    """Prompt at positions 0-1, chosen at 2, rejected at 2-3, window 2 (q sees k when q - k < 2), on top
    of the packing rule: each response sees only the prompt tokens inside its own window."""
    pair_ids, segment_ids = torch.zeros(1, 5), torch.tensor([[0, 0, 1, 2, 2]])
    positions = torch.tensor([[0, 1, 2, 2, 3]])
    window = masks.dense_mask(pair_ids, segment_ids) & masks.position_mask(positions, masks.AttentionRule(window=2))
    assert window[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 1, 1, 0, 0],  # chosen (position 2) no longer sees position 0
        [0, 1, 0, 1, 0],  # rejected at position 2: the same prompt token, and never the chosen one
        [0, 0, 0, 1, 1],  # rejected at position 3: only itself and the rejected token before it
    ]
    chunk = masks.position_mask(torch.tensor([[0, 1, 2, 3]]), masks.AttentionRule(chunk=2))[0, 0].int()
    assert chunk.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]


@pytest.mark.slow
def test_mistral_window_16_old_mask_fails_new_mask_is_exact(tokenizer, monkeypatch):
    model = tiny(tokenizer, "mistral", sliding_window=16)
    assert shared_error(model, tokenizer) <= 1e-5
    layout, why = choose_layout(model, "auto", tokenizer.pad_token_id)
    assert layout == "shared" and "longer than its smallest attention window, 16 tokens" in why

    monkeypatch.setattr(masks, "attention_rules", lambda config: OLD_MASK)
    assert shared_error(model, tokenizer) > 1e-3  # the mask that ignored the window
    layout, why = choose_layout(model, "auto", tokenizer.pad_token_id)
    assert layout == "padded" and "different rewards in the shared layout" in why  # and the probe sees it


@pytest.mark.slow
def test_alternating_layers_need_one_mask_per_layer_type(tokenizer, monkeypatch):
    """Gemma 3: sliding and full layers. One mask for both, windowed or not, is wrong; the dict is exact."""
    model = tiny(tokenizer, "gemma3_text", sliding_window=16, layer_types=["sliding_attention", "full_attention"])
    rules = masks.attention_rules(model.hf.config)
    assert rules == {"full_attention": masks.AttentionRule(), "sliding_attention": masks.AttentionRule(window=16)}
    assert shared_error(model, tokenizer) <= 1e-5
    for one_for_all in (OLD_MASK, {None: masks.AttentionRule(window=16)}):
        monkeypatch.setattr(masks, "attention_rules", lambda config, rules=one_for_all: rules)
        assert shared_error(model, tokenizer) > 1e-3, one_for_all


@pytest.mark.slow
def test_llama4_chunked_attention_is_exact(tokenizer, monkeypatch):
    model = tiny(
        tokenizer, "llama4_text", attention_chunk_size=16, num_local_experts=2, intermediate_size_mlp=64, head_dim=8
    )
    assert masks.attention_rules(model.hf.config) == {None: masks.AttentionRule(chunk=16)}
    assert shared_error(model, tokenizer) <= 1e-5
    monkeypatch.setattr(masks, "attention_rules", lambda config: OLD_MASK)
    assert shared_error(model, tokenizer) > 1e-3


@pytest.mark.parametrize("floor_scale", [8, 8192])
@pytest.mark.slow
def test_llama4_nope_layers_full_attention_and_temperature_tuning(tokenizer, floor_scale, monkeypatch):
    """Layer 1 without RoPE: full attention (a dict of masks: chunked and full) and queries scaled by the
    token's column in the row. Rows wider than floor_scale - 1 would change that scale: shared is refused."""
    extra = {"attention_chunk_size": 16, "num_local_experts": 2, "intermediate_size_mlp": 64, "head_dim": 8}
    model = tiny(tokenizer, "llama4_text", **extra, no_rope_layers=[1, 0], floor_scale=floor_scale, attn_scale=1.0)
    assert set(masks.attention_rules(model.hf.config)) == {"chunked_attention", "full_attention"}
    layout, why = choose_layout(model, "auto", tokenizer.pad_token_id)
    if floor_scale == 8:
        assert layout == "padded" and "exact in the shared layout for rows of at most 7" in why
        monkeypatch.setattr(masks, "column_limit", lambda config: None)
        assert shared_error(model, tokenizer) > 1e-4  # what the refusal avoids
    else:
        assert layout == "shared" and "packed rows of at most 8191 tokens" in why
        assert shared_error(model, tokenizer) <= 1e-5


def test_a_window_longer_than_the_probe_is_said(tokenizer):
    model = tiny(tokenizer, "mistral", sliding_window=PROBE_MAX_TOKENS + 100)
    layout, why = choose_layout(model, "auto", tokenizer.pad_token_id)
    assert layout == "shared" and f"{PROBE_MAX_TOKENS + 100} tokens, is longer than the probe" in why


@pytest.mark.parametrize(
    ("model_type", "extra"),
    [("mamba", {"state_size": 4}), ("lfm2", {"layer_types": ["conv", "full_attention"]})],
)
def test_recurrent_models_are_refused_shared_with_the_reason(tokenizer, model_type, extra):
    model = tiny(tokenizer, model_type, **extra)
    layout, why = choose_layout(model, "auto", tokenizer.pad_token_id)
    assert layout == "padded" and f"{model_type} is recurrent or hybrid" in why and "carry state" in why
    with pytest.raises(ValueError, match="collator.layout=shared is not possible: .*recurrent"):
        choose_layout(model, "shared", tokenizer.pad_token_id)


GEMMA3 = {"sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"], "head_dim": 8}


@pytest.fixture(scope="module")
def flex_rewards(tokenizer) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """FlexAttention compiled once for both of its checks: a plain Llama (one BlockMask for every layer) and Gemma
    3's alternating layers (one BlockMask per layer type, each with its window), each as (the flex model's rewards
    in the shared layout, separate forwards of the same weights under SDPA), on one batch of pairs and a group of
    three. One batch, so one shape: compiling flex_attention again in this process for other shapes fails in
    torch 2.13's CPU inductor (a C++ compile error), and each compile costs seconds (the first tens of seconds)."""
    vocab, pad = len(tokenizer), tokenizer.pad_token_id
    groups = window_batch(vocab, 6, seed=4)
    batch = SharedCollator(pad, pack_length=PACK)(groups)
    assert shares_rows(batch, groups)
    out = {}
    torch._dynamo.reset()  # a fresh compile, whatever ran before in this process
    for model_type, extra in [("llama", {}), ("gemma3_text", GEMMA3)]:
        shape = RandomInitConfig(
            model_type=model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        )
        shape.config = extra
        torch.manual_seed(0)
        flex = build_model(ModelConfig(attn_implementation="flex_attention", random_init=shape), vocab, pad, None)
        sdpa = build_model(ModelConfig(random_init=shape), vocab, pad, None)
        sdpa.load_state_dict(flex.state_dict())
        with torch.no_grad():
            out[model_type] = group_rewards(RewardModel(flex).eval(), batch), separate(RewardModel(sdpa).eval(), groups)
    torch._dynamo.reset()  # and leave none behind
    return out


@pytest.mark.slow
def test_flex_attention_block_mask_equals_separate_forwards(flex_rewards):
    """The FlexAttention path (compiled; the fast path on GPU) builds the packing rule's mask as a BlockMask."""
    got, want = flex_rewards["llama"]
    assert got.shape == want.shape == (2 * 6 + 3,)
    assert (got - want).abs().max().item() <= 1e-5


@pytest.mark.slow
def test_flex_attention_block_masks_apply_windows_per_layer_type(flex_rewards):
    """The FlexAttention path with Gemma 3's alternating layers: one BlockMask per layer type, each with its
    window, equals separate forwards of the same weights under SDPA."""
    got, want = flex_rewards["gemma3_text"]
    assert got.shape == want.shape == (2 * 6 + 3,)
    assert (got - want).abs().max().item() <= 1e-5
