"""What the export's files hold for readers other than transformers 5 (old transformers, TRL, RewardBench,
OpenRLHF), checked on three real runs: a random-init model, a LoRA run exported again by `python -m rm
export`, and a local "pretrained" model whose tokenizer adds a BOS and whose rope theta is not 10,000.
The other tools themselves are exercised in their own venvs by scripts/check_clients.sh."""

import copy
import json
import os
import sys

import pytest
import torch
import yaml
from transformers import AutoModelForSequenceClassification, AutoTokenizer, LlamaConfig, pipeline

from conftest import QUICKSTART, REPO, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config
from rm.data.formats.chat import HH_TAGS, Message, Renderer, hh_text
from rm.data.load import load_splits
from rm.evaluation.score_file import score_file
from rm.export.card import hub_id_of
from rm.export.folder import RunData
from rm.export.rescore import score_encoded
from rm.export.restore import run_tokenizer
from rm.model.pretrained import load_reward_model
from rm.tokens.tokenizer import HH_CHAT_TEMPLATE, load_tokenizer
from rm.training.run import main as train

sys.path.insert(0, str(REPO / "scripts" / "clients"))
from make_exports import save_bos_llama  # noqa: E402  (one builder for this test and the client check)

RUN = [
    "data.synthetic.n_train=96",
    "data.synthetic.n_eval=24",
    *TINY_MODEL,
    "train.batch_size=8",
    "train.max_steps=3",
    "train.eval_steps=0",
    "train.log_steps=3",
    "train.lr=3e-3",
    "train.report_to=[]",
    "collator.max_length=96",
    "export.normalize=true",
]
ROPE_THETA = 500000.0
CONVERSATIONS = [
    [{"role": "user", "content": "What is 2 plus 3?"}, {"role": "assistant", "content": " It is 5."}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris, of course."},
    ],
    [{"role": "user", "content": "line one\nline two"}, {"role": "assistant", "content": "ok\n\nsure"}],
]


def pretrained_with_bos(folder, tokenizer):
    """A local 'pretrained' Llama: its tokenizer adds <s> in front of every text; rope theta 500,000."""
    tok = copy.deepcopy(tokenizer)
    save_bos_llama(folder, tok, hidden_size=32, layers=1, max_positions=256, rope_theta=ROPE_THETA)
    reloaded = load_tokenizer(str(folder))
    assert reloaded("a b")["input_ids"][0] == reloaded.bos_token_id  # the case this file is about
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer):
    """{name: (export folder, run dir)} for the three kinds of run."""
    root = tmp_path_factory.mktemp("compat")
    base = pretrained_with_bos(root / "pretrained", tokenizer)
    out = {}
    for name, extra in {
        "random": [],
        "lora": ["model.lora.r=4", "model.lora.target_modules=[q_proj,v_proj]"],
        "bos": [f"model.name_or_path={base}", "model.random_init.max_position_embeddings=256"],
    }.items():
        train(load_config(QUICKSTART, RUN + extra + [f"output_dir={root / name}"]))
        out[name] = (root / name / "export", root / name)
    assert cli(["export", str(root / "lora"), "--out", str(root / "lora-cli")]) == 0
    out["lora-cli"] = (root / "lora-cli", root / "lora")
    return out


KINDS = ["random", "lora", "bos", "lora-cli"]


def fits(tok, pair, cfg) -> bool:
    """Pairs that training did not have to cut (so the whole text is what it trained on)."""
    longer = max(pair.chosen, pair.rejected, key=lambda r: len(tok(pair.prompt + r)["input_ids"]))
    return len(tok(pair.prompt + longer)["input_ids"]) <= cfg.collator.max_length


def read(folder, name):
    return json.loads((folder / name).read_text())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow
def test_tokenizer_config_is_readable_by_transformers_4_and_cuts_like_rm_score(runs, kind):
    folder, run_dir = runs[kind]
    saved = read(folder, "tokenizer_config.json")
    assert saved["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert saved["model_input_names"] == ["input_ids", "attention_mask"]
    assert not {"is_local", "local_files_only"} & set(saved)
    max_length = yaml.safe_load((run_dir / "config.yaml").read_text())["collator"]["max_length"]
    tok = AutoTokenizer.from_pretrained(folder)
    assert (tok.model_max_length, tok.truncation_side, tok.padding_side) == (max_length, "left", "right")
    assert "token_type_ids" not in tok("a b")
    cut = tok("x " * 400 + "the end", truncation=True)["input_ids"]
    assert len(cut) == max_length and tok.decode(cut).endswith("the end")


@pytest.mark.parametrize("kind", KINDS)
def test_config_has_the_top_level_keys_older_readers_use(runs, kind):
    folder, _ = runs[kind]
    config = read(folder, "config.json")
    for key, value in config["rope_parameters"].items():
        if key != "rope_type":
            assert config[key] == value
    assert config["torch_dtype"] == config["dtype"] and config["problem_type"] == "regression"
    if kind == "bos":
        assert config["rope_theta"] == ROPE_THETA
    # transformers 5 reads the same model back from the file with the extra keys
    assert (
        AutoModelForSequenceClassification.from_pretrained(folder).config.rope_parameters["rope_theta"]
        == (config["rope_parameters"]["rope_theta"])
    )


@pytest.mark.parametrize("kind", KINDS)
def test_the_chat_template_renders_messages_exactly_as_rm_trains_on_them(runs, kind):
    tok = AutoTokenizer.from_pretrained(runs[kind][0])
    assert tok.chat_template == HH_CHAT_TEMPLATE
    renderer = Renderer(None, "hh")
    for conversation in CONVERSATIONS:
        messages = [Message(m["role"], m["content"]) for m in conversation]
        other = messages[:-1] + [Message("assistant", "something else")]
        pair = renderer.pair(messages, other)
        assert tok.apply_chat_template(conversation, tokenize=False) == pair.prompt + pair.chosen == hh_text(messages)
        assert tok.apply_chat_template(conversation[:-1], tokenize=False, add_generation_prompt=True) == pair.prompt
    with pytest.raises(Exception, match="no role tool"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_the_templates_tags_are_rms():
    """Every role rm renders has the same tag in the template (jinja2 directly: no tokenizer needed)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    messages = [Message(role, f"{role} says x") for role in HH_TAGS]
    rendered = (
        ImmutableSandboxedEnvironment()
        .from_string(HH_CHAT_TEMPLATE)
        .render(messages=[{"role": m.role, "content": m.content} for m in messages], add_generation_prompt=False)
    )
    assert rendered == hh_text(messages)


@pytest.mark.parametrize("kind", KINDS)
def test_every_way_of_tokenizing_gives_the_ids_rm_trained_on(runs, kind):
    """Training's ids == tokenizer(text) == tokenizer(text, add_special_tokens=False) == the chat template's."""
    folder, run_dir = runs[kind]
    cfg = load_config(run_dir / "config.yaml")
    tok = AutoTokenizer.from_pretrained(folder)
    _, held = load_splits(cfg.data, run_dir)
    encoded = RunData.load(cfg, run_dir, run_tokenizer(cfg, run_dir)).eval
    assert len(encoded) == len(held)
    fitting = [(p, e) for p, e in zip(held, encoded, strict=True) if fits(tok, p, cfg)]
    assert len(fitting) >= 5
    for pair, enc in fitting:
        text = pair.prompt + pair.chosen
        trained = [*enc.prompt_ids, *enc.chosen_ids]
        assert tok(text)["input_ids"] == trained == tok(text, add_special_tokens=False)["input_ids"]
    if kind == "bos":  # the base tokenizer adds <s>; rm neither trains on it nor exports it
        assert tok.bos_token_id not in trained


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow
def test_pipeline_trl_style_and_rm_score_give_the_trained_rewards(runs, kind, tmp_path):
    folder, run_dir = runs[kind]
    cfg = load_config(run_dir / "config.yaml")
    tok = AutoTokenizer.from_pretrained(folder)
    held = load_splits(cfg.data, run_dir)[1]
    encoded = RunData.load(cfg, run_dir, run_tokenizer(cfg, run_dir)).eval
    held, encoded = zip(*[(p, e) for p, e in zip(held, encoded, strict=True) if fits(tok, p, cfg)][:8], strict=True)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    trained = score_encoded(model, list(encoded), tok.pad_token_id)["chosen"].double()
    texts = [p.prompt + p.chosen for p in held]

    pipe = pipeline("text-classification", model=str(folder))  # no function_to_apply: raw by default
    by_pipeline = torch.tensor([pipe(t)[0]["score"] for t in texts], dtype=torch.double)
    # TRL's reward functions: text, then add_special_tokens=False, right padding
    batch = tok(texts, add_special_tokens=False, padding=True, padding_side="right", return_tensors="pt")
    with torch.no_grad():
        by_trl = model(**batch).logits[:, 0].double()
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"prompt": p.prompt, "response": p.chosen}) + "\n" for p in held)
    )
    reward_model, score_tok = load_reward_model(str(folder))
    score_file(reward_model, score_tok, tmp_path / "in.jsonl", tmp_path / "out.jsonl", progress=False)
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    by_rm_score = torch.tensor([json.loads(line)["reward"] for line in lines], dtype=torch.double)
    for got in (by_pipeline, by_trl, by_rm_score):
        assert torch.allclose(got, trained, atol=1e-5, rtol=0), (got - trained).abs().max()


@pytest.mark.parametrize("kind", KINDS)
def test_normalisation_is_stored_where_openrlhf_reads_it(runs, kind):
    config = read(runs[kind][0], "config.json")
    norm = config["reward_normalization"]
    assert (config["mean"], config["std"]) == (norm["mean"], norm["std"]) and norm["std"] > 0


def test_every_file_is_as_readable_as_a_new_file(runs):
    umask = os.umask(0)
    os.umask(umask)
    for kind in KINDS:
        for path in runs[kind][0].iterdir():
            assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path


def test_rm_export_of_a_finished_lora_run_writes_the_end_of_run_card(runs):
    end_of_run, cli_export = runs["lora"][0], runs["lora-cli"][0]
    card = (cli_export / "README.md").read_text()
    assert card == (end_of_run / "README.md").read_text()
    assert "- lora" in card and "| LoRA | r 4, alpha" in card and "on q_proj, v_proj;" in card
    assert sorted(p.name for p in cli_export.iterdir()) == sorted(p.name for p in end_of_run.iterdir())
    for path in end_of_run.iterdir():  # the whole folder, as the README promises
        assert (cli_export / path.name).read_bytes() == path.read_bytes(), path.name


def test_hub_ids_come_from_names_and_from_hugging_face_cache_paths():
    assert hub_id_of("EleutherAI/pythia-410m", "model") == "EleutherAI/pythia-410m"
    cache = "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B/snapshots/0123abc"
    assert hub_id_of(cache, "model") == "Qwen/Qwen2.5-0.5B"
    assert hub_id_of("/data/hub/datasets--Anthropic--hh-rlhf/snapshots/9f", "dataset") == "Anthropic/hh-rlhf"
    assert hub_id_of("/tmp/my-model", "model") is None and hub_id_of("synthetic", "dataset") is None


def test_legacy_keys_are_generated_from_the_config_and_transformers_5_reads_them_back():
    """A Llama 3 rope (not the default type): 4.x reads rope_theta at the top and the rest as rope_scaling."""
    from rm.export.compat import legacy_config_keys

    rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    saved = LlamaConfig(rope_parameters=dict(rope), dtype="bfloat16").to_dict()
    extra = legacy_config_keys(saved)
    assert extra["rope_theta"] == 500000.0 and extra["rope_scaling"] == saved["rope_parameters"]
    assert extra["torch_dtype"] == "bfloat16" and "rope_type" not in extra
    assert legacy_config_keys(saved | extra) == {}  # never overwrites, and idempotent
    assert LlamaConfig.from_dict(saved | extra).rope_parameters == saved["rope_parameters"]
