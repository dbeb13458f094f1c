import pytest
import torch

from conftest import tiny_model
from rm.collate.padded import PaddedCollator
from rm.model.reward import RewardModel, last_token_index, pair_rewards
from rm.tokens.store import EncodedGroup


def test_last_token_index_for_right_and_left_padding():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]])
    assert last_token_index(mask).tolist() == [2, 0, 3, 3]


def single_reward(model: RewardModel, ids: list[int]) -> float:
    t = torch.tensor([ids])
    return model(input_ids=t, attention_mask=torch.ones_like(t)).item()


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt_neox"])
def test_padded_batch_rewards_equal_unpadded_forwards(tokenizer, model_type):
    """Each reward in a padded batch equals that of the sequence run alone (no padding at all)."""
    model = RewardModel(tiny_model(tokenizer, model_type))
    g = torch.Generator().manual_seed(0)

    def rand(n):
        return torch.randint(2, len(tokenizer), (n,), generator=g).tolist()

    batch = [EncodedGroup.pair(rand(p), rand(c), rand(r), 0) for p, c, r in [(5, 3, 9), (1, 7, 2), (12, 1, 1)]]
    collated = PaddedCollator(tokenizer.pad_token_id)(batch)
    with torch.no_grad():
        chosen, rejected = pair_rewards(model, collated)
        for i, pair in enumerate(batch):
            assert chosen[i].item() == pytest.approx(single_reward(model, pair.prompt_ids + pair.chosen_ids), abs=1e-5)
            assert rejected[i].item() == pytest.approx(
                single_reward(model, pair.prompt_ids + pair.rejected_ids), abs=1e-5
            )


def test_reward_is_read_at_the_last_real_token_even_when_pad_equals_eos(tokenizer):
    """Sequences that end in eos, padded with eos: the reward must come from the final eos itself."""
    eos = tokenizer.eos_token_id
    model = RewardModel(tiny_model(tokenizer, pad_token_id=eos))
    short, long = [5, 9, 3, eos], [5, 9, 3, 8, 8, 2, eos]
    collated = PaddedCollator(pad_token_id=eos)([EncodedGroup.pair([], short, long, 0)])
    with torch.no_grad():
        chosen, rejected = pair_rewards(model, collated)
        expected = single_reward(model, short)
        assert chosen.item() == pytest.approx(expected, abs=1e-5)
        assert rejected.item() == pytest.approx(single_reward(model, long), abs=1e-5)
        # Reading one position earlier (where a pad-id search would stop) gives a different number.
        assert abs(single_reward(model, short[:-1]) - expected) > 1e-4


def test_reward_module_reads_decoders_at_the_last_token_and_other_heads_by_their_own_pooling(tokenizer):
    """One choice for every loader (rm/model/reward.py:reward_module): a decoder's linear `score` head gets
    `RewardModel`; a head that pools the sequence itself (RoBERTa's dense + out_proj on <s>) gets `PooledLogits`,
    whose rewards are that model's own logits."""
    from transformers import RobertaConfig, RobertaForSequenceClassification

    from rm.model.reward import PooledLogits, reward_module

    assert type(reward_module(tiny_model(tokenizer))) is RewardModel
    shape = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, num_labels=1)
    torch.manual_seed(0)
    roberta = RobertaForSequenceClassification(RobertaConfig(vocab_size=len(tokenizer), **shape)).eval()
    model = reward_module(roberta)
    assert type(model) is PooledLogits
    ids = torch.randint(5, len(tokenizer), (2, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    with torch.no_grad():
        got, want = model(input_ids=ids, attention_mask=mask), roberta(input_ids=ids, attention_mask=mask).logits
    assert got.dtype == torch.float32 and torch.equal(got, want[:, 0].float())


def test_models_without_a_score_head_are_refused(tokenizer):
    class Encoder(torch.nn.Module):
        base_model = None

    with pytest.raises(TypeError, match="no linear `score` head"):
        RewardModel(Encoder())


def test_a_causal_lm_checkpoint_loads_by_path_with_a_fresh_score_head(tokenizer, tmp_path):
    """What a Hub name resolves to: a causal-LM folder. Its backbone weights carry over exactly."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    from rm.config import ModelConfig
    from rm.model.build import build_model

    lm = AutoModelForCausalLM.from_config(
        LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
        )
    )
    lm.save_pretrained(tmp_path / "lm")
    model = build_model(ModelConfig(name_or_path=str(tmp_path / "lm")), len(tokenizer), tokenizer.pad_token_id, None)
    assert type(model).__name__ == "LlamaForSequenceClassification" and model.config.num_labels == 1
    assert model.config.pad_token_id == tokenizer.pad_token_id
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(model.model.state_dict()[name], tensor), name
    assert model.score.weight.shape == (1, 32)


def test_rewards_are_computed_without_a_key_value_cache(tokenizer):
    """An eval batch would otherwise hold every layer's keys and values at once (8 layers, 16,000 tokens: the
    peak went from 617 to 336 MiB); the rewards are the same either way."""
    from rm.model.reward import takes_use_cache, transformers_model

    model = RewardModel(tiny_model(tokenizer))
    backbone = transformers_model(model.hf).base_model
    seen = []
    hook = backbone.register_forward_pre_hook(lambda m, a, kw: seen.append(kw.get("use_cache")), with_kwargs=True)
    batch = PaddedCollator(tokenizer.pad_token_id)([EncodedGroup.pair([5, 6, 7], [8, 9], [10], 0, index=0)])
    with torch.no_grad():
        got = pair_rewards(model, batch)
        hook.remove()
        ids = torch.tensor([[5, 6, 7, 8, 9]])
        cached = backbone(input_ids=ids, use_cache=True)
        want = transformers_model(model.hf).score(cached.last_hidden_state[:, -1]).squeeze(-1)
    assert seen == [False] and cached.past_key_values is not None
    assert got[0].item() == pytest.approx(want.item(), abs=1e-6)

    class NoCache(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return input_ids

    assert takes_use_cache(type(backbone)) and not takes_use_cache(NoCache)
