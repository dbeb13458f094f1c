"""A run on an architecture transformers has no reward class for (Granite, Falcon-H1): its export carries
`modeling_rm_reward.py` with `auto_map`, plain transformers loads it the documented way (remote code) and
reproduces the run's rewards, and rm rebuilds checkpoints and evaluates the export without that file."""

import ast
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from conftest import QUICKSTART, TINY
from rm.config import load_config
from rm.data.load import load_pairs
from rm.export.folder import export_run
from rm.training.run import main

RUNS = {
    "granite": ["model.random_init.config={attention_multiplier: 0.5, residual_multiplier: 0.5}"],
    "falcon_h1": [
        "model.random_init.config={mamba_n_heads: 4, mamba_d_head: 16, mamba_d_ssm: 64, mamba_d_state: 8, "
        "mamba_chunk_size: 16, head_dim: 8}",
    ],
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def run(request, tmp_path_factory):
    name = request.param
    out = tmp_path_factory.mktemp(name)
    short = ["train.max_steps=6", "train.save_steps=6", "train.eval_steps=0", "train.report_to=[]"]
    overrides = [*TINY, *short, f"model.random_init.model_type={name}", *RUNS[name], f"output_dir={out}"]
    cfg = load_config(QUICKSTART, overrides)
    return name, out, cfg, main(cfg)


def documented_rewards(export, texts: list[str]) -> torch.Tensor:
    """The model card's snippet: AutoModelForSequenceClassification with trust_remote_code=True."""
    tokenizer = AutoTokenizer.from_pretrained(export)
    model = AutoModelForSequenceClassification.from_pretrained(export, trust_remote_code=True).eval()
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits[:, 0]


@pytest.mark.slow
def test_the_export_carries_its_modeling_file_and_says_why(run):
    name, out, cfg, _ = run
    export = out / "export"
    config = json.loads((export / "config.json").read_text())
    cls = config["architectures"][0]
    assert cls.endswith("ForSequenceClassification") and config["model_type"] == name
    assert config["auto_map"] == {"AutoModelForSequenceClassification": f"modeling_rm_reward.{cls}"}
    source = (export / "modeling_rm_reward.py").read_text()
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    imported = {(n.module if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0] for n in nodes}
    assert imported == {"torch", "transformers"}  # nothing from rm: it loads where rm is not installed
    card = (export / "README.md").read_text()
    assert "from_pretrained(model_id, trust_remote_code=True)" in card
    assert f"Why `trust_remote_code=True`: transformers has no sequence-classification class for `{name}`" in card
    if name == "granite":  # plain transformers asks first; in a fresh process, as loading with remote code
        # registers the class in this one's Auto mapping (which rm ignores: rm/model/architecture.is_native)
        code = "from transformers import AutoModelForSequenceClassification as A; A.from_pretrained('export')"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=out)
        assert proc.returncode != 0 and "trust_remote_code=True" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_plain_transformers_reproduces_the_runs_rewards(run, tmp_path):
    from rm.config import DataConfig
    from rm.evaluation.eval_report import EvalOptions
    from rm.evaluation.eval_report import evaluate_model as rm_eval

    name, out, cfg, result = run
    pairs = load_pairs(str(out / "data"), "test", [])
    chosen = documented_rewards(out / "export", [p.prompt + p.chosen for p in pairs]).double()
    assert chosen.mean().item() == pytest.approx(result["overall"]["mean_chosen_reward"], abs=1e-5)
    # rm eval (rm's own class, no remote code) gives the run's numbers too.
    got = rm_eval(str(out / "export"), DataConfig(source=str(out / "data")), tmp_path / "eval", EvalOptions())
    assert got["overall"]["accuracy"] == pytest.approx(result["overall"]["accuracy"], abs=1e-9)
    assert got["overall"]["mean_chosen_reward"] == pytest.approx(result["overall"]["mean_chosen_reward"], abs=1e-5)


def test_a_checkpoint_exports_to_the_same_files(run, tmp_path):
    """`python -m rm export` rebuilds the wrapped model from config.yaml (random_init.config included)."""
    name, out, cfg, _ = run
    again = export_run(out / "checkpoints" / "step-6", tmp_path / "from-checkpoint")
    final = load_file(out / "export" / "model.safetensors")
    weights = load_file(again / "model.safetensors")
    assert weights.keys() == final.keys() and all(torch.equal(weights[k], final[k]) for k in final)
    assert (again / "modeling_rm_reward.py").read_text() == (out / "export" / "modeling_rm_reward.py").read_text()


def test_the_cards_snippet_runs_with_remote_code(run, monkeypatch):
    """The model card's own usage snippet, executed in the export folder, gives rm's rewards."""
    from test_card import snippet

    from rm.model.pretrained import load_reward_model

    name, out, cfg, _ = run
    code = snippet((out / "export" / "README.md").read_text())
    assert code.count("trust_remote_code=True") == 2  # the model and the pipeline
    monkeypatch.chdir(out / "export")
    namespace: dict = {}
    exec(compile(code, "README.md snippet", "exec"), namespace)
    model, tokenizer = load_reward_model(str(out / "export"))
    batch = tokenizer([namespace["prompt"] + r for r in namespace["responses"]], return_tensors="pt", padding=True)
    with torch.no_grad():
        want = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert torch.allclose(namespace["rewards"], want, atol=1e-5, rtol=0)
    assert namespace["pipe"](namespace["prompt"])[0]["label"] == "reward"
