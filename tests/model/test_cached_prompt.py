"""Groups scored on their prompt's cached keys and values give the rewards of each text scored alone (padded, one
row each), for every decoder the cache path accepts; models whose attention the path cannot reproduce (a sliding
window) are refused with the reason, and keep the shared layout."""

import random

import pytest
import torch

from conftest import tiny_model
from rm.collate.scoring import PaddedLayout, ScoreSeq, prompt_runs
from rm.collate.token_budget import chunks
from rm.model.cached_prompt import prefix_support
from rm.model.reward import RewardModel


def random_seqs(vocab: int, seed: int) -> list[ScoreSeq]:
    """Runs of responses to shared prompts (1 to 5 responses, 1 to 40 tokens each), prompts of 1 to 30 tokens."""
    rng = random.Random(seed)
    seqs = []
    for _ in range(6):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 30))]
        for _ in range(rng.randint(1, 5)):
            seqs.append(ScoreSeq(prompt, [rng.randrange(vocab) for _ in range(rng.randint(1, 40))], group=True))
    return seqs


def alone(model: torch.nn.Module, seqs: list[ScoreSeq], pad: int) -> torch.Tensor:
    """Each sequence in a padded batch of its own: no neighbour, no cache."""
    layout = PaddedLayout(pad)
    return torch.cat([layout.rewards(model, layout.collate([s])) for s in seqs])


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2"])
def test_cached_prompts_give_each_text_its_own_reward(tokenizer, model_type):
    model = RewardModel(tiny_model(tokenizer, model_type))
    pad = tokenizer.pad_token_id
    scorer, why_not = prefix_support(model, pad, torch.device("cpu"))
    assert scorer is not None, why_not
    with torch.inference_mode():
        for seed in range(3):
            seqs = random_seqs(len(tokenizer), seed)
            got = scorer.rewards(seqs)
            assert got.shape == (len(seqs),)
            torch.testing.assert_close(got, alone(model, seqs, pad), atol=1e-5, rtol=0)


def test_eager_attention_takes_the_additive_mask(tokenizer):
    hf = tiny_model(tokenizer)
    hf.config._attn_implementation = "eager"
    hf.base_model.config._attn_implementation = "eager"
    model = RewardModel(hf)
    scorer, why_not = prefix_support(model, tokenizer.pad_token_id, torch.device("cpu"))
    assert scorer is not None and scorer.additive, why_not
    seqs = random_seqs(len(tokenizer), 7)
    with torch.inference_mode():
        torch.testing.assert_close(scorer.rewards(seqs), alone(model, seqs, tokenizer.pad_token_id), atol=1e-5, rtol=0)


def test_a_sliding_window_keeps_the_shared_layout(tokenizer):
    hf = tiny_model(tokenizer, "mistral")
    hf.config.sliding_window = 8
    scorer, why_not = prefix_support(RewardModel(hf), tokenizer.pad_token_id, torch.device("cpu"))
    assert scorer is None and "window" in why_not


def test_chunks_cover_every_index_once_within_the_slack():
    rng = random.Random(0)
    lengths = [rng.randint(1, 400) for _ in range(300)]
    parts = chunks(lengths, slack=1.2)
    assert sorted(i for c in parts for i in c) == list(range(300))
    for c in parts:
        assert len(c) * max(lengths[i] for i in c) <= 1.2 * sum(lengths[i] for i in c) or len(c) == 1


def test_runs_are_consecutive_sequences_with_one_prompt():
    a, b = [1, 2], [3]
    seqs = [ScoreSeq(a, [5]), ScoreSeq(a, [6]), ScoreSeq(b, [7]), ScoreSeq(a, [8])]
    assert prompt_runs(seqs) == [[0, 1], [2], [3]]


def test_attribute_outputs_and_a_reward_mix_come_out_as_the_models_forward_gives_them(tokenizer):
    """A run served from its weights keeps its mark `rm_reward_mix` (model.head.reward_from_attributes): output 0 is
    the mix of the attribute outputs on the cached path too, not the head's untied row 0."""
    from rm.config import ModelConfig, RandomInitConfig
    from rm.config.head_config import HeadConfig
    from rm.model.build import build_model

    shape = RandomInitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    cfg = ModelConfig(
        random_init=shape, head=HeadConfig(attributes=["a", "b"], reward_from_attributes={"a": 0.5, "b": -2.0})
    )
    torch.manual_seed(1)
    model = RewardModel(build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id).eval())
    scorer, why_not = prefix_support(model, tokenizer.pad_token_id, torch.device("cpu"))
    assert scorer is not None, why_not
    seqs = random_seqs(len(tokenizer), 4)
    with torch.inference_mode():
        got, want = scorer.rewards(seqs), alone(model, seqs, tokenizer.pad_token_id)
    assert got.shape == (len(seqs), 3)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(got[:, 0], 0.5 * got[:, 1] - 2.0 * got[:, 2], atol=1e-5, rtol=0)
