"""Offline by construction: nothing in the suite may wait on a network that is not there."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The smallest model and tokenizer the end-to-end tests train: seconds per run on 2 CPU cores.
TINY_MODEL = [
    "model.random_init.hidden_size=32",
    "model.random_init.intermediate_size=64",
    "model.random_init.num_hidden_layers=1",
    "tokenizer.vocab_size=300",
]
HH_HARMLESS_TEST = REPO.parent / "shared" / "data" / "hh-rlhf" / "harmless-base" / "test.jsonl.gz"


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory):
    from rm import synthetic

    return synthetic.write_dataset(tmp_path_factory.mktemp("synthetic"), n_train=300, n_eval=60, seed=7)


@pytest.fixture(scope="session")
def tokenizer(synthetic_root):
    """A byte-level BPE trained on the generated data: offline, and distinct pad and eos."""
    from rm.data import load_pairs
    from rm.tokenizer import train_bpe

    pairs = load_pairs(str(synthetic_root), "train", [])
    return train_bpe([t for p in pairs for t in (p.prompt, p.chosen, p.rejected)], vocab_size=400)


def tiny_model(tokenizer, model_type: str = "llama", seed: int = 0, pad_token_id: int | None = None):
    from rm.config import ModelConfig, RandomInitConfig
    from rm.model import build_model

    torch.manual_seed(seed)
    cfg = ModelConfig(
        random_init=RandomInitConfig(
            model_type=model_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        )
    )
    pad = tokenizer.pad_token_id if pad_token_id is None else pad_token_id
    return build_model(cfg, len(tokenizer), pad, tokenizer.eos_token_id).eval()


@pytest.fixture(scope="session")
def exported_tiny(tokenizer, tmp_path_factory):
    """A tiny random Llama exported as rm exports trained models (no training: the scores are arbitrary
    but fixed, which is all the eval and score tests need)."""
    from rm.config import RunConfig
    from rm.export import export_model

    out = tmp_path_factory.mktemp("tiny") / "export"
    return export_model(tiny_model(tokenizer), tokenizer, out, RunConfig(), step=None, final_step=None)
