"""A reward model over any causal LM: native sequence-classification classes and rm's head on the others.

Each architecture is built tiny from random init (issue 13's list: sliding windows, alternating layer
types, chunked attention, MoE, state space and hybrid models), trained three steps, and checked against
separate unpadded forwards in the layout the start-up probe picked; its export, loaded the documented
way in plain transformers, must reproduce rm's rewards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import torch
from transformers import AutoModelForSequenceClassification
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

from rm.collate.pack import SharedCollator
from rm.collate.padded import PaddedCollator
from rm.config import ModelConfig, RandomInitConfig, RunConfig
from rm.model.build import build_model
from rm.model.loss import bradley_terry_loss
from rm.model.probe import choose_layout
from rm.model.reward import RewardModel, pair_rewards
from rm.tokens.store import EncodedGroup

WINDOW = 16  # issue 13's case: windows and chunks of 16 tokens, pairs of 9-45 tokens
ALTERNATING = {"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"]}
SHARED = "reproduces separate forwards"
PAST_WINDOW = f"longer than its smallest attention window, {WINDOW} tokens"
RECURRENT = "packing several sequences in a row would carry state"


@dataclass
class Arch:
    model_type: str
    extra: dict = field(default_factory=dict)
    layout: str = "shared"
    why: str = SHARED


ARCHS = [
    Arch("llama"),
    Arch("qwen3", {"sliding_window": WINDOW, "use_sliding_window": True, "max_window_layers": 1}, why=PAST_WINDOW),
    Arch("gpt_neox"),
    Arch("mistral", {"sliding_window": WINDOW}, why=PAST_WINDOW),
    Arch("phi3", {"sliding_window": WINDOW}, why=PAST_WINDOW),
    Arch("gemma2", ALTERNATING | {"head_dim": 8}, why=PAST_WINDOW),
    Arch("gemma3_text", ALTERNATING | {"head_dim": 8}, why=PAST_WINDOW),
    Arch(
        "gemma4_text",
        ALTERNATING | {"head_dim": 8, "vocab_size_per_layer_input": 512, "hidden_size_per_layer_input": 8},
        why=PAST_WINDOW,
    ),
    Arch("cohere2", ALTERNATING, why=PAST_WINDOW),
    Arch("granite"),
    Arch("granitemoe", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    Arch("olmoe", {"num_experts": 4, "num_experts_per_tok": 2}),
    Arch(
        "llama4_text",
        {"attention_chunk_size": WINDOW, "num_local_experts": 2, "intermediate_size_mlp": 64, "head_dim": 8},
        why=PAST_WINDOW,
    ),
    Arch("mamba", {"state_size": 4}, "padded", RECURRENT),
    Arch(
        "falcon_h1",
        {"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_ssm": 64, "mamba_d_state": 8, "head_dim": 8}
        | {"mamba_chunk_size": 16},  # the reference scan (no mamba_ssm kernel) is slow on long chunks
        "padded",
        RECURRENT,
    ),
    Arch(
        "nemotron_h",
        {
            "layers_block_type": ["linear_attention", "full_attention"],
            "mamba_num_heads": 4,
            "mamba_head_dim": 16,
            "ssm_state_size": 8,
            "n_groups": 1,
            "head_dim": 8,
        },
        "padded",
        RECURRENT,
    ),
    Arch("lfm2", {"layer_types": ["conv", "full_attention"]}, "padded", RECURRENT),
]
IDS = [a.model_type for a in ARCHS]


def test_the_list_covers_issue_13():
    """At least 14 architectures, 8 or more of them without a sequence-classification class in transformers."""
    wrapped = [a.model_type for a in ARCHS if a.model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES]
    assert len(ARCHS) >= 14 and len(wrapped) >= 8, wrapped


def tiny(arch: Arch, vocab: int, pad: int, eos: int | None, **model_cfg) -> ModelConfig:
    shape = RandomInitConfig(
        model_type=arch.model_type,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=256,
        config=arch.extra,
    )
    return ModelConfig(random_init=shape, **model_cfg)


def window_pairs(vocab: int, n: int, seed: int) -> list[EncodedGroup]:
    """Pairs of 9-45 tokens: prompts and responses on both sides of a 16-token window's edge."""
    rng = random.Random(seed)

    def ids(k):
        return [rng.randrange(3, vocab) for _ in range(k)]

    pairs = []
    for i in range(n):
        p = rng.randint(1, 25)
        c, r = rng.randint(max(1, 9 - p), 45 - p), rng.randint(max(1, 9 - p), 45 - p)
        pairs.append(EncodedGroup.pair(ids(p), ids(c), ids(r), 0, index=i))
    return pairs


def separate(model: RewardModel, pairs: list[EncodedGroup]) -> torch.Tensor:
    """The reference: every sequence alone, unpadded, the model's own masks and positions."""

    def one(ids):
        t = torch.tensor([ids])
        return model(input_ids=t, attention_mask=torch.ones_like(t))[0]

    seqs = [p.prompt_ids + p.chosen_ids for p in pairs] + [p.prompt_ids + p.rejected_ids for p in pairs]
    return torch.stack([one(s) for s in seqs])  # [2 * pairs]: chosen, then rejected


def collate(layout: str, pad: int, pairs: list[EncodedGroup]) -> dict[str, torch.Tensor]:
    return (SharedCollator(pad, pack_length=96) if layout == "shared" else PaddedCollator(pad))(pairs)


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
def test_architecture_trains_is_exact_in_its_layout_and_exports(arch, tokenizer, tmp_path):
    vocab, pad, eos = len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id
    cfg = tiny(arch, vocab, pad, eos)
    torch.manual_seed(0)
    hf = build_model(cfg, vocab, pad, eos)
    model = RewardModel(hf)
    native = arch.model_type in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES
    assert type(hf).__name__.endswith("ForSequenceClassification")
    assert (type(hf).__module__.startswith("transformers.")) == native

    layout, why = choose_layout(model, "auto", pad)
    assert (layout, arch.why in why) == (arch.layout, True), why

    # Three training steps in the chosen layout: finite losses, and every trained tensor moves.
    model.train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        batch = collate(layout, pad, window_pairs(vocab, 4, seed=step))
        loss = bradley_terry_loss(*pair_rewards(model, batch))
        assert torch.isfinite(loss), step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert not torch.equal(before["hf.score.weight"], model.hf.score.weight)
    moved = sum(not torch.equal(before[n], p) for n, p in model.named_parameters())
    assert moved > len(before) // 2, f"{moved} of {len(before)} tensors trained"

    # The trained model, in its layout, equals separate unpadded forwards.
    model.eval()
    pairs = window_pairs(vocab, 6, seed=10)
    with torch.no_grad():
        chosen, rejected = pair_rewards(model, collate(layout, pad, pairs))
        want = separate(model, pairs)
    assert (torch.cat([chosen, rejected]) - want).abs().max().item() <= 1e-5

    # The export, loaded the documented way in plain transformers, gives rm's rewards.
    from rm.export.folder import Weights, export_model

    run_cfg = RunConfig()
    run_cfg.model = cfg
    out = export_model(hf, tokenizer, tmp_path / f"export-{arch.model_type}", run_cfg, Weights(3, 3))
    assert (out / "modeling_rm_reward.py").is_file() == (not native)
    card = (out / "README.md").read_text()
    assert ("trust_remote_code=True" in card) == (not native)
    plain = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=not native).eval()
    texts = [p.prompt_ids + p.chosen_ids for p in pairs] + [p.prompt_ids + p.rejected_ids for p in pairs]
    rows = PaddedCollator(pad)([EncodedGroup.pair([], t, t, 0) for t in texts])
    n = len(texts)
    with torch.no_grad():
        got = plain(input_ids=rows["input_ids"][:n], attention_mask=rows["attention_mask"][:n]).logits[:, 0]
    assert (got - want).abs().max().item() <= 1e-5
