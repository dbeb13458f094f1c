"""A reward model over any causal LM: native sequence-classification classes and rm's head on the others.

Each architecture is built tiny from random init (the kinds that break a naive head: sliding windows, alternating layer
types, chunked attention, MoE, state space and hybrid models), trained three steps, and checked against
separate unpadded forwards in the layout the start-up probe picked (and, where that is shared, in the
packed layout, which takes the same masks); its export, loaded the documented way in plain transformers,
must reproduce rm's rewards. The checked batch holds a group of three responses beside the pairs,
so groups of mixed K share rows, and every response's reward is checked.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import torch
from transformers import AutoModelForSequenceClassification
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

from rm.collate.pack import PackedCollator, SharedCollator
from rm.collate.padded import PaddedCollator, pad_rows, response_order
from rm.config import ModelConfig, RandomInitConfig, RunConfig
from rm.model.build import build_model
from rm.model.group_loss import bradley_terry_loss
from rm.model.probe import choose_layout
from rm.model.reward import RewardModel, group_rewards, pair_rewards
from rm.tokens.store import EncodedGroup

WINDOW = 16  # the case that broke the old mask: windows and chunks of 16 tokens, pairs of 9-45 tokens
PACK = 128  # shared rows wide enough that the checked group of three shares its row with pairs (asserted)
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


def test_the_list_covers_the_architectures_that_broke_a_naive_head():
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


def window_batch(vocab: int, n: int, seed: int) -> list[EncodedGroup]:
    """`n` window pairs with, in their middle, a group of three responses (ranked 0, 1, 2) whose sequences end
    inside the first 16-token window, past it, and past the second: pairs and a group of three share rows, and
    the group's third response is the only one in its reward slot."""
    rng = random.Random(f"group {seed}")
    p = rng.randint(4, 12)
    edges = [1, WINDOW - p + 1, 2 * WINDOW - p + 1, 46 - p]  # response lengths whose sequence ends in each window
    lengths = [rng.randrange(lo, hi) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    rng.shuffle(lengths)
    prompt, *responses = [[rng.randrange(3, vocab) for _ in range(k)] for k in (p, *lengths)]
    pairs = window_pairs(vocab, n, seed)
    return [*pairs[: n // 2], EncodedGroup(prompt, responses, [0, 1, 2], 0, margin=0.0, index=n), *pairs[n // 2 :]]


def sequences(groups: list[EncodedGroup]) -> list[list[int]]:
    """Every response after its prompt, in the order the layouts read rewards (for pairs: chosen, then rejected)."""
    return [list(groups[i].prompt_ids) + list(groups[i].response_ids[k]) for i, k in response_order(groups)]


def separate(model: RewardModel, groups: list[EncodedGroup]) -> torch.Tensor:
    """The reference: every sequence alone, unpadded, the model's own masks and positions: [responses]."""

    def one(ids):
        t = torch.tensor([ids])
        return model(input_ids=t, attention_mask=torch.ones_like(t))[0]

    return torch.stack([one(s) for s in sequences(groups)])


def shares_rows(batch: dict[str, torch.Tensor], groups: list[EncodedGroup]) -> bool:
    """Whether every group of three or more sits in a packed row beside another group."""
    rows = batch["pair_ids"]
    big = [i for i, g in enumerate(groups) if len(g.response_ids) > 2]
    return bool(big) and all(len(set(rows[(rows == i).any(dim=1)].flatten().tolist()) - {-1, i}) > 0 for i in big)


def collate(layout: str, pad: int, pairs: list[EncodedGroup]) -> dict[str, torch.Tensor]:
    return (SharedCollator(pad, pack_length=PACK) if layout == "shared" else PaddedCollator(pad))(pairs)


def worst(got: torch.Tensor, want: torch.Tensor, groups: list[EncodedGroup]) -> tuple[float, tuple[int, int]]:
    """The largest difference and the (group, response) it is at."""
    diff = (got - want).abs()
    return diff.max().item(), response_order(groups)[diff.argmax().item()]


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
@pytest.mark.slow
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

    # The trained model, in its layout, equals separate unpadded forwards: every response of the pairs and
    # of the group of three beside them; the packed layout too where the shared one is used (same masks).
    model.eval()
    groups = window_batch(vocab, 6, seed=10)
    layouts = {layout: collate(layout, pad, groups)}
    if layout == "shared":
        assert shares_rows(layouts["shared"], groups)
        layouts["packed"] = PackedCollator(pad, pack_length=48)(groups)
    with torch.no_grad():
        want = separate(model, groups)
        for name, batch in layouts.items():
            got = group_rewards(model, batch)
            assert got.shape == want.shape == (2 * 6 + 3,)
            error, at = worst(got, want, groups)
            assert error <= 1e-5, (name, error, "(group, response)", at)

    # The export, loaded the documented way in plain transformers, gives rm's rewards.
    from rm.export.folder import Weights, export_model

    run_cfg = RunConfig()
    run_cfg.model = cfg
    out = export_model(hf, tokenizer, tmp_path / f"export-{arch.model_type}", run_cfg, Weights(3, 3))
    assert (out / "modeling_rm_reward.py").is_file() == (not native)
    card = (out / "README.md").read_text()
    assert ("trust_remote_code=True" in card) == (not native)
    plain = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=not native).eval()
    rows = pad_rows(sequences(groups), pad)
    with torch.no_grad():
        got = plain(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"]).logits[:, 0]
    assert (got - want).abs().max().item() <= 1e-5
