"""On a CUDA GPU (run by scripts/gpu_check.sh; skipped elsewhere): the shared-prefix layout in bf16 with
SDPA and with FlexAttention is as exact as the padded layout, and a bf16 LoRA run trains.

"Exact" in bf16 cannot mean equal: every kernel rounds differently. The reference is the same weights
in fp32, each sequence run alone with no mask; the shared layout's error against it must be of the
padded layout's size (within 2x, floored at 2% of the reward scale), and breaking the shared mask
(rejected tokens allowed to see the chosen ones) must give an error several times larger, so the
check can fail.
"""

import copy
import json

import pytest
import torch

from conftest import REPO, random_pairs
from rm.collate.pack import CHOSEN, PROMPT, SharedCollator
from rm.collate.padded import PaddedCollator
from rm.config import ModelConfig, RandomInitConfig, load_config
from rm.model.build import build_model
from rm.model.reward import RewardModel, pair_rewards

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check.sh runs these)"),
]


def alone(model: RewardModel, pairs, device: str) -> torch.Tensor:
    """Chosen then rejected rewards, each sequence run by itself: no padding, no custom mask."""

    def one(ids: list[int]) -> torch.Tensor:
        t = torch.tensor([ids], device=device)
        return model(input_ids=t, attention_mask=torch.ones_like(t))[0]

    return torch.stack(
        [one(p.prompt_ids + p.chosen_ids) for p in pairs] + [one(p.prompt_ids + p.rejected_ids) for p in pairs]
    )


def layout_errors(tokenizer, attn: str, device: str) -> dict[str, float]:
    """Max |reward - fp32 reference| in bf16: padded layout, shared layout, shared with a broken mask."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        random_init=RandomInitConfig(
            hidden_size=256, num_hidden_layers=4, num_attention_heads=8, intermediate_size=512
        ),
        attn_implementation=attn,
    )
    fp32 = RewardModel(build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)).eval()
    bf16 = copy.deepcopy(fp32).to(device=device, dtype=torch.bfloat16)
    reference = RewardModel(fp32.hf).to(device)
    reference.hf.set_attn_implementation("sdpa")  # no mask needed: one sequence at a time
    pairs = random_pairs(len(tokenizer), 24, seed=5)
    with torch.no_grad():
        want = alone(reference, pairs, device).float()
        out = {"scale": want.abs().max().item()}
        for name, collate in [
            ("padded", PaddedCollator(tokenizer.pad_token_id)),
            ("shared", SharedCollator(tokenizer.pad_token_id, pack_length=256)),
        ]:
            batch = {k: v.to(device) for k, v in collate(pairs).items()}
            out[name] = (torch.cat(pair_rewards(bf16, batch)) - want).abs().max().item()
        # Chosen tokens labelled as prompt: rejected tokens may now attend to them.
        batch["segment_ids"][batch["segment_ids"] == CHOSEN] = PROMPT
        out["broken"] = (torch.cat(pair_rewards(bf16, batch)) - want).abs().max().item()
    return out


@pytest.mark.parametrize("attn", ["sdpa", "flex_attention"])
def test_shared_layout_in_bf16_is_as_exact_as_padded(tokenizer, attn):
    err = layout_errors(tokenizer, attn, "cuda")
    print(f"{attn} bf16: max |reward - fp32 reference| {err}")
    assert err["padded"] <= 0.05 * err["scale"]  # bf16 itself is close to fp32
    assert err["shared"] <= max(2 * err["padded"], 0.02 * err["scale"])
    assert err["broken"] >= 5 * err["shared"]


def test_a_bf16_lora_run_with_checkpointing_trains_on_the_gpu(tmp_path):
    out = tmp_path / "gpu-run"
    overrides = [
        "data.synthetic.n_train=600",
        "data.synthetic.n_eval=120",
        "train.max_steps=40",
        "train.batch_size=16",
        "train.lr=2e-3",
        "train.mixed_precision=auto",
        "train.report_to=[]",
        "train.log_steps=10",
        "model.lora.r=8",
        "model.gradient_checkpointing=true",
        "collator.layout=shared",
        f"output_dir={out}",
    ]
    from rm.training.run import main

    result = main(load_config(REPO / "configs" / "quickstart.yaml", overrides))
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert result["overall"]["n"] == 120 and result["train"]["nonfinite_skipped"] == 0
    assert all(row["loss"] == row["loss"] for row in log)
    assert (out / "export" / "model.safetensors").is_file()
