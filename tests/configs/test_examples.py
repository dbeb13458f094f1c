"""Every run config in configs/ trains as shipped: two steps on a handful of records written in its dataset's
published fields (tests/configs/fixtures/), offline, with the model shrunk to the suite's tiny random Llama. Each
run must exit 0 and write the numbers its feature is about: group metrics where the data has K responses, a fit
per attribute for a multi-attribute head, Davidson's learned nu, the leaderboard suites' scores, a LoRA export
merged into a plain model. A config added to configs/ is picked up here; one whose data has no fixture fails,
naming the source to add to DATA."""

import json
import math
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import REPO, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LAUNCHERS, SWEEPS = REPO / "configs" / "accelerate", REPO / "configs" / "sweeps"  # not run configs
CONFIGS = sorted(p for p in (REPO / "configs").rglob("*.yaml") if p.parent not in (LAUNCHERS, SWEEPS))
DATA = {
    "openbmb/UltraFeedback": "ultrafeedback.jsonl",
    "berkeley-nest/Nectar": "nectar.jsonl",
    "nvidia/HelpSteer2": "helpsteer2.jsonl",
    "trl-lib/ultrafeedback_binarized": "chat_pairs.jsonl",
    "Skywork/Skywork-Reward-Preference-80K-v0.2": "chat_pairs.jsonl",
    "Anthropic/hh-rlhf": "hh_rlhf.jsonl",
    "hironow/test-hh-rlhf-12k-ja": "argilla.jsonl",
}
"""A config's data.source (a Hub name) -> the fixture in that dataset's fields; a local hh-rlhf file reads hh_rlhf."""
SUITES = {"rewardbench": "rewardbench.jsonl", "rewardbench2": "rewardbench2.jsonl", "rm-bench": "rm_bench.jsonl"}
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Small and short for every config: 2 steps, eval at the end only, no checkpoint, no tracker, one thread.
RUN = [
    *TINY_MODEL,
    "model.random_init.num_attention_heads=4",
    "model.random_init.max_position_embeddings=256",
    "collator.max_length=256",
    "train.max_steps=2",
    "train.save_steps=0",
    "train.report_to=[]",
    "train.num_threads=1",
    "train.mixed_precision='no'",
]


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    """What a Hub chat model brings besides its weights: a tokenizer with a chat template (a BPE learnt on the
    fixtures here), so that a config naming one renders its message lists with a template, as it would."""
    from rm.tokens.tokenizer import train_bpe

    texts = [line for f in sorted(FIXTURES.glob("*.jsonl")) for line in f.read_text().splitlines()]
    tok = train_bpe(texts, 300)
    tok.add_tokens(["<|user|>", "<|assistant|>", "<|end|>"], special_tokens=True)
    tok.chat_template = CHAT_TEMPLATE
    path = tmp_path_factory.mktemp("chat-tokenizer")
    tok.save_pretrained(path)
    return path


def fixture_for(source: str) -> Path:
    name = DATA.get(source) or ("hh_rlhf.jsonl" if "hh-rlhf" in source and source.endswith(".jsonl.gz") else None)
    assert name, f"no fixture for data.source {source!r}: add one in its published fields to DATA"
    return FIXTURES / name


def data_overrides(cfg, root: Path) -> list[str]:
    """data.source as the fixture: the file itself, held out by fraction; or, where the config names the dataset's
    own splits or hh-rlhf's subset folders, a folder of them laid out as the Hub repository has them."""
    if cfg.data.source == "synthetic":
        return ["data.synthetic.n_train=48", "data.synthetic.n_eval=16"]
    fixture = fixture_for(cfg.data.source)
    if not cfg.data.eval_split:
        return [f"data.source={fixture}", "data.eval_fraction=0.25"]
    lines = fixture.read_text().splitlines(keepends=True)
    cut = len(lines) * 3 // 4
    for subset in cfg.data.subsets or [""]:
        folder = root / "data" / subset
        folder.mkdir(parents=True)
        (folder / f"{cfg.data.train_split}.jsonl").write_text("".join(lines[:cut]))
        (folder / f"{cfg.data.eval_split}.jsonl").write_text("".join(lines[cut:]))
    return [f"data.source={root / 'data'}"]


def overrides(cfg, root: Path, chat_tokenizer: Path) -> list[str]:
    out = [*RUN, *data_overrides(cfg, root), f"output_dir={root / 'run'}"]
    if cfg.model.name_or_path:  # a Hub model: the tiny random one in its place, its adapters (LoRA) kept
        out += ["model.name_or_path=", "model.random_init.model_type=llama", "model.dtype=float32"]
        out.append(f"tokenizer.name_or_path={chat_tokenizer}")
    if cfg.train.eval_suites:
        suites = ", ".join(f"{{suite: {s.suite}, data: {FIXTURES / SUITES[s.suite]}}}" for s in cfg.train.eval_suites)
        out.append(f"train.eval_suites=[{suites}]")
    learned_nu = cfg.loss.ties == "davidson" and cfg.loss.davidson_nu == "learned"
    if not (cfg.model.lora.r or learned_nu):  # the export is where a LoRA merge and a learned nu show
        out.append("export.enabled=false")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO / "configs")))
def test_every_config_trains_and_reports_what_it_is_about(path, tmp_path, chat_tokenizer):
    cfg = load_config(path)
    assert cli(["train", str(path), *overrides(cfg, tmp_path, chat_tokenizer)]) == 0
    run = tmp_path / "run"
    result = json.loads((run / "eval.json").read_text())
    overall = result["overall"]
    assert overall["n"] > 0 and 0.0 <= overall["accuracy"] <= 1.0 and result["train"]["steps"] == 2
    report = json.loads((run / "data_report.json").read_text())
    if report.get("groups", {}).get("eval", {}).get("groups"):  # K responses a prompt: the group metrics too
        assert 0.0 <= overall["top1_accuracy"] <= 1.0 and "kendall_tau" in overall
    for name in cfg.model.head.attributes:
        fit = result["attributes"][name]["overall"]
        assert fit["n"] > 0 and math.isfinite(fit["rmse"]), name
    if cfg.loss.ties == "davidson" and cfg.loss.davidson_nu == "learned":
        nu = json.loads((run / "export" / "config.json").read_text())["rm_davidson_nu"]
        assert math.isfinite(nu) and nu > 0 and nu != pytest.approx(math.log(2), abs=1e-6)  # it moved from its start
    if cfg.train.eval_suites:
        rows = [json.loads(line) for line in (run / "suites.jsonl").read_text().splitlines()]
        final = {r["suite"]: r["score"] for r in rows if r["step"] == 2}
        assert sorted(final) == sorted(s.suite for s in cfg.train.eval_suites)
        assert all(0.0 <= score <= 1.0 for score in final.values()), final
    if cfg.model.lora.r:
        weights = load_file(run / "export" / "model.safetensors")
        assert weights and not any("lora_" in k for k in weights)  # merged into the backbone, no peft needed
        assert f"r {cfg.model.lora.r}, alpha {cfg.model.lora.alpha}" in (run / "export" / "README.md").read_text()
