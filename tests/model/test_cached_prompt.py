"""Groups scored on their prompt's cached keys and values give the rewards of each text scored alone (padded, one
row each), for every decoder the cache path accepts; models whose attention the path cannot reproduce (a sliding
window) are refused with the reason, and keep the shared layout."""

import random

import pytest
import torch

from conftest import tiny_model
from rm.collate.scoring import PaddedLayout, scored
from rm.collate.token_budget import chunks
from rm.model.cached_prompt import prefix_support
from rm.model.reward import RewardModel
from rm.tokens.store import EncodedGroup


def random_groups(vocab: int, seed: int) -> list[EncodedGroup]:
    """Groups of 1 to 5 responses (1 to 40 tokens each) to prompts of 1 to 30 tokens."""
    rng = random.Random(seed)

    def ids(low: int, high: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(rng.randint(low, high))]

    return [scored(ids(1, 30), [ids(1, 40) for _ in range(rng.randint(1, 5))]) for _ in range(6)]


def alone(model: torch.nn.Module, groups: list[EncodedGroup], pad: int) -> torch.Tensor:
    """Each response after its prompt in a padded batch of its own: no neighbour, no cache."""
    layout = PaddedLayout(pad)
    return torch.cat(
        [layout.rewards(model, layout.collate([scored(g.prompt_ids, [r])])) for g in groups for r in g.response_ids]
    )


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2"])
@pytest.mark.slow
def test_cached_prompts_give_each_text_its_own_reward(tokenizer, model_type):
    model = RewardModel(tiny_model(tokenizer, model_type))
    pad = tokenizer.pad_token_id
    scorer, why_not = prefix_support(model, pad, torch.device("cpu"))
    assert scorer is not None, why_not
    with torch.inference_mode():
        for seed in range(3):
            groups = random_groups(len(tokenizer), seed)
            got = scorer.rewards(groups)
            assert got.shape == (sum(len(g.response_ids) for g in groups),)
            torch.testing.assert_close(got, alone(model, groups, pad), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_eager_attention_takes_the_additive_mask(tokenizer):
    hf = tiny_model(tokenizer)
    hf.config._attn_implementation = "eager"
    hf.base_model.config._attn_implementation = "eager"
    model = RewardModel(hf)
    scorer, why_not = prefix_support(model, tokenizer.pad_token_id, torch.device("cpu"))
    assert scorer is not None and scorer.additive, why_not
    groups = random_groups(len(tokenizer), 7)
    with torch.inference_mode():
        got = scorer.rewards(groups)
        torch.testing.assert_close(got, alone(model, groups, tokenizer.pad_token_id), atol=1e-5, rtol=0)


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
