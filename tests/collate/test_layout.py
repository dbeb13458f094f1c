"""The shared-prefix layout is exact: same rewards and gradients as separate unpadded forwards."""

import random

import pytest
import torch

from conftest import random_pairs, tiny_model
from rm.collate.pack import PackedCollator, SharedCollator
from rm.errors import ConfigError
from rm.model.group_loss import bradley_terry_loss
from rm.model.masks import dense_mask
from rm.model.reward import RewardModel, pair_rewards
from rm.tokens.store import EncodedGroup

ARCHS = ["llama", "qwen2", "mistral", "gpt_neox"]


def test_collator_matches_its_docstring_example():
    batch = [
        EncodedGroup.pair([5, 6], [8], [11, 12], 3, margin=0.5, index=10),
        EncodedGroup.pair([7], [9, 10], [13], 4, index=11),
    ]
    out = SharedCollator(pad_token_id=0, pack_length=9)(batch)
    assert out["input_ids"].tolist() == [[5, 6, 8, 11, 12, 7, 9, 10, 13]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 2, 3, 0, 1, 2, 1]]
    assert out["pair_ids"].tolist() == [[0, 0, 0, 0, 0, 1, 1, 1, 1]]
    assert out["segment_ids"].tolist() == [[0, 0, 1, 2, 2, 0, 1, 1, 2]]
    assert out["reward_index"].tolist() == [2, 7, 4, 8]
    assert out["better"].tolist() == [0, 1] and out["worse"].tolist() == [2, 3]
    assert out["subset_ids"].tolist() == [3, 4] and out["pair_index"].tolist() == [10, 11]
    assert out["margin"].tolist() == [0.5, 0.0]


def test_packed_collator_matches_its_docstring_example():
    batch = [
        EncodedGroup.pair([5, 6], [8], [11, 12], 3, margin=0.5, index=10),
        EncodedGroup.pair([7], [9, 10], [13], 4, index=11),
    ]
    out = PackedCollator(pad_token_id=0, pack_length=7)(batch)
    assert out["input_ids"].tolist() == [[5, 6, 11, 12, 5, 6, 8], [7, 9, 10, 7, 13, 0, 0]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 0, 1, 0, 0]]
    assert out["pair_ids"].tolist() == [[1, 1, 1, 1, 0, 0, 0], [2, 2, 2, 3, 3, -1, -1]]
    assert out["segment_ids"].tolist() == [[0, 0, 1, 1, 0, 0, 1], [0, 1, 1, 0, 1, -1, -1]]
    assert out["reward_index"].tolist() == [6, 9, 3, 11]
    assert out["better"].tolist() == [0, 1] and out["worse"].tolist() == [2, 3]
    assert out["subset_ids"].tolist() == [3, 4] and out["pair_index"].tolist() == [10, 11]
    # the prompt really is there twice: every pair's slots are 2 * prompt + chosen + rejected
    assert int((out["pair_ids"] >= 0).sum()) == sum(2 * len(p.prompt_ids) + len(p.chosen_ids) + len(p.rejected_ids)
                                                   for p in batch)  # fmt: skip


def test_mask_rule_on_one_pair():
    """prompt (0, 1), chosen (2), rejected (3, 4): rejected sees the prompt and itself, never the chosen."""
    out = SharedCollator(pad_token_id=0)([EncodedGroup.pair([5, 6], [8], [11, 12], 0)])
    mask = dense_mask(out["pair_ids"], out["segment_ids"])[0, 0].int().tolist()
    assert mask == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 1, 0, 1, 1],
    ]


def separate_rewards(model, pairs):
    """The reference: each sequence alone, unpadded, no custom mask, default positions."""

    def one(ids):
        t = torch.tensor([ids])
        return model(input_ids=t, attention_mask=torch.ones_like(t))[0]

    chosen = torch.stack([one(p.prompt_ids + p.chosen_ids) for p in pairs])
    rejected = torch.stack([one(p.prompt_ids + p.rejected_ids) for p in pairs])
    return chosen, rejected


def grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("collator", [SharedCollator, PackedCollator])
@pytest.mark.parametrize("arch", ARCHS)
def test_shared_layout_equals_separate_forwards_rewards_and_gradients(tokenizer, arch, collator):
    """Both packed layouts, the prompt shared (SharedCollator) or duplicated (PackedCollator)."""
    torch.manual_seed(0)
    model = RewardModel(tiny_model(tokenizer, arch)).train()
    model.hf.config.attention_dropout = 0.0
    pairs = random_pairs(len(tokenizer), 9, seed=1)
    batch = collator(tokenizer.pad_token_id, pack_length=80)(pairs)
    assert batch["input_ids"].shape[0] < len(pairs)  # several pairs really share rows

    chosen, rejected = pair_rewards(model, batch)
    ref_c, ref_r = separate_rewards(model, pairs)
    assert (chosen - ref_c).abs().max().item() <= 1e-5
    assert (rejected - ref_r).abs().max().item() <= 1e-5

    # Centring makes d loss / d(r_c + r_r) non-zero, so biases after the last block get a real gradient
    # (plain BT gives them exactly zero: its chosen and rejected gradients cancel).
    margin = batch["margin"]
    got = grads(model, bradley_terry_loss(chosen, rejected, margin, center_rewards_coef=0.1))
    ref_c, ref_r = separate_rewards(model, pairs)
    want = grads(model, bradley_terry_loss(ref_c, ref_r, margin, center_rewards_coef=0.1))
    assert got.keys() == want.keys() and len(got) == len(list(model.parameters()))
    largest = max(g.abs().max() for g in want.values())
    for name in want:
        # Relative to the tensor's own gradient, floored at 1/1000 of the largest one (for ~0 gradients).
        scale = torch.maximum(want[name].abs().max(), 1e-3 * largest)
        assert ((got[name] - want[name]).abs().max() / scale).item() <= 1e-4, name


def test_breaking_the_mask_breaks_exactness(tokenizer, monkeypatch):
    """Letting rejected tokens see the chosen tokens changes the rejected rewards: the check has teeth."""
    import rm.model.masks

    model = RewardModel(tiny_model(tokenizer, "llama"))
    pairs = random_pairs(len(tokenizer), 4, seed=2)
    batch = SharedCollator(tokenizer.pad_token_id)(pairs)

    def leaky(pair_ids, segment_ids):
        t = pair_ids.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        return ((pair_ids[:, :, None] == pair_ids[:, None, :]) & causal)[:, None]

    with torch.no_grad():
        ref_c, ref_r = separate_rewards(model, pairs)
        monkeypatch.setattr(rm.model.masks, "dense_mask", leaky)
        chosen, rejected = pair_rewards(model, batch)
    assert (chosen - ref_c).abs().max().item() <= 1e-5  # chosen never needed the rule
    assert (rejected - ref_r).abs().max().item() > 1e-3


def test_eager_attention_takes_the_additive_form_of_the_mask(tokenizer):
    from rm.config import ModelConfig, RandomInitConfig
    from rm.model.build import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(
        attn_implementation="eager",
        random_init=RandomInitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
    )
    model = RewardModel(build_model(cfg, len(tokenizer), tokenizer.pad_token_id, None).eval())
    pairs = random_pairs(len(tokenizer), 5, seed=3)
    with torch.no_grad():
        chosen, rejected = pair_rewards(model, SharedCollator(tokenizer.pad_token_id, pack_length=64)(pairs))
        ref_c, ref_r = separate_rewards(model, pairs)
    assert torch.allclose(chosen, ref_c, atol=1e-5) and torch.allclose(rejected, ref_r, atol=1e-5)


def test_auto_layout_falls_back_to_padded_and_says_why(tokenizer, monkeypatch):
    import rm.model.masks
    from rm.model.probe import choose_layout

    model = RewardModel(tiny_model(tokenizer, "llama"))
    assert choose_layout(model, "auto", tokenizer.pad_token_id)[0] == "shared"
    assert choose_layout(model, "padded", tokenizer.pad_token_id)[0] == "padded"

    def leaky(pair_ids, segment_ids):  # what an architecture that ignores the custom mask amounts to
        t = pair_ids.shape[1]
        return ((pair_ids[:, :, None] == pair_ids[:, None, :]) & torch.ones(t, t, dtype=torch.bool).tril())[:, None]

    monkeypatch.setattr(rm.model.masks, "dense_mask", leaky)
    layout, why = choose_layout(model, "auto", tokenizer.pad_token_id)
    assert layout == "padded" and "different rewards in the shared layout" in why
    with pytest.raises(ValueError, match="collator.layout=shared is not possible"):
        choose_layout(model, "shared", tokenizer.pad_token_id)
    # a user's setting: an RMError, so the CLI ends it in one line; packed is refused the same way
    with pytest.raises(ConfigError, match="collator.layout=packed is not possible: .*use collator.layout=padded"):
        choose_layout(model, "packed", tokenizer.pad_token_id)


def test_encoders_are_not_given_the_shared_layout(tokenizer):
    from transformers import BertConfig, BertForSequenceClassification

    from rm.model.probe import choose_layout

    bert = BertForSequenceClassification(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            intermediate_size=64,
            num_labels=1,
        )  # fmt: skip
    )
    layout, why = choose_layout(RewardModel(bert), "auto", tokenizer.pad_token_id)
    assert layout == "padded" and "not a causal decoder" in why


def test_packed_scoring_shares_prompts_and_equals_separate_forwards(tokenizer):
    """Scoring: texts with the same prompt share one copy of it; every reward equals a lone forward."""
    from rm.collate.scoring import PackedScoring, scored

    model = RewardModel(tiny_model(tokenizer, "qwen2"))
    rng = random.Random(5)

    def ids(n):
        return [rng.randrange(2, len(tokenizer)) for _ in range(n)]

    p1, p2 = ids(9), ids(4)
    groups = [scored(p1, [ids(3), ids(5), ids(1)]), scored(p2, [ids(6)]), scored([], [ids(7)])]
    texts = [(g.prompt_ids, r) for g in groups for r in g.response_ids]
    layout = PackedScoring(tokenizer.pad_token_id)
    batch = layout.collate(groups)
    assert batch["input_ids"].numel() < sum(len(p) + len(r) for p, r in texts)  # the shared prompt is stored once
    with torch.no_grad():
        got = layout.rewards(model, batch)
        for i, (prompt, response) in enumerate(texts):
            t = torch.tensor([prompt + response])
            assert got[i].item() == pytest.approx(
                model(input_ids=t, attention_mask=torch.ones_like(t))[0].item(), abs=1e-5
            )
