"""The model card: Hub metadata the Hub's own parser reads, an eval table with the eval.json numbers,
and a usage snippet that is taken out of the card and run."""

import json
import re

import card_runs
import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from conftest import tiny_model
from rm.config import RunConfig, load_config
from rm.data.load import load_pairs
from rm.export.card import CardFacts, is_hub_id, render_card
from rm.export.folder import ExportOptions, RunData, Weights, export_model
from rm.model.reward import RewardModel
from rm.tokens.encode import encode_pairs

EVAL = {
    "overall": {"accuracy": 0.75, "n": 4, "mean_margin": 0.5, "mean_chosen_reward": 1.0, "mean_rejected_reward": 0.5},
    "subsets": {
        "harmless": {
            "accuracy": 1.0,
            "n": 3,
            "mean_margin": 0.8,
            "mean_chosen_reward": 1.2,
            "mean_rejected_reward": 0.4,
        },
        "helpful": {
            "accuracy": 0.0,
            "n": 1,
            "mean_margin": -0.4,
            "mean_chosen_reward": 0.4,
            "mean_rejected_reward": 0.8,
        },
    },
}


def facts(**kw) -> CardFacts:
    return CardFacts(**({"architecture": "LlamaForSequenceClassification", "n_parameters": 10**6} | kw))


def front_matter(card: str) -> dict:
    match = re.match(r"---\n(.*?)\n---\n", card, re.S)
    assert match, card[:200]
    return yaml.safe_load(match.group(1))


def snippet(card: str) -> str:
    (code,) = re.findall(r"```python\n(.*?)```", card, re.S)
    return code


def test_hub_metadata_names_the_base_model_and_datasets_only_when_they_are_on_the_hub(tmp_path):
    hub = load_config(overrides=["model.name_or_path=EleutherAI/pythia-410m", "data.source=Anthropic/hh-rlhf"])
    meta = front_matter(render_card(hub, facts(step=5, final_step=5)))
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-classification"
    assert "reward-model" in meta["tags"] and "lora" not in meta["tags"]
    assert meta["base_model"] == "EleutherAI/pythia-410m" and meta["datasets"] == ["Anthropic/hh-rlhf"]

    local = load_config(overrides=[f"model.name_or_path={tmp_path}", "data.source=../data/hh/test.jsonl.gz"])
    meta = front_matter(
        render_card(local, facts(step=5, final_step=5, lora={"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}))
    )
    assert "base_model" not in meta and "datasets" not in meta and "lora" in meta["tags"]
    assert "datasets" not in front_matter(render_card(RunConfig(), facts(step=1, final_step=1)))  # synthetic
    assert [is_hub_id(n) for n in ["gpt2", "org/name", "./x", "/abs/x", "a/b/c", ""]] == [1, 1, 0, 0, 0, 0]


def test_the_hub_parser_reads_the_card_and_the_eval_table_has_the_eval_json_numbers(tmp_path):
    card = render_card(RunConfig(), facts(step=7, final_step=7, eval_result=EVAL))
    (tmp_path / "README.md").write_text(card)
    parsed = ModelCard.load(tmp_path / "README.md")
    assert parsed.data.library_name == "transformers" and "reward-model" in parsed.data.tags
    rows = [line for line in card.splitlines() if line.startswith("| ") and " | " in line and "---" not in line]
    table = rows[1:4]  # after the header: two subsets, then overall
    assert table == [
        "| harmless | 3 | 1.0000 | 0.8000 | 1.2000 | 0.4000 |",
        "| helpful | 1 | 0.0000 | -0.4000 | 0.4000 | 0.8000 |",
        "| **overall** | 4 | 0.7500 | 0.5000 | 1.0000 | 0.5000 |",
    ]
    assert "the final weights of the run, after 7 optimizer steps" in card
    assert "train.lr" not in card and "lr: 0.0001" in card  # the full config, as YAML


def test_a_metric_eval_json_has_no_number_for_is_n_a_in_the_table_never_a_crash():
    """A diverged run's eval.json (written by an rm before the run was refused) has null mean rewards: `rm export`
    crashed with a TypeError formatting None, and the end-of-run card showed `nan`."""
    nulls = {"mean_margin": None, "mean_chosen_reward": None, "mean_rejected_reward": float("nan")}
    result = {"overall": EVAL["overall"] | nulls, "subsets": {"harmless": EVAL["subsets"]["harmless"] | nulls}}
    card = render_card(RunConfig(), facts(step=7, final_step=7, eval_result=result))
    assert "| **overall** | 4 | 0.7500 | n/a | n/a | n/a |" in card and "nan" not in card


def test_an_unfinished_run_checkpoint_says_so(tmp_path):
    card = render_card(RunConfig(), facts(step=3, final_step=None))
    assert "after 3 optimizer steps (the run had not finished when exported)" in card and "Not evaluated" in card


@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "raw"])
@pytest.mark.slow
def test_the_usage_snippet_runs_and_gives_the_training_time_rewards(
    tokenizer, synthetic_root, tmp_path, monkeypatch, capsys, normalize
):
    hf = tiny_model(tokenizer, seed=1)
    with torch.no_grad():
        hf.score.weight.normal_(0, 1.0)
    pairs = load_pairs(str(synthetic_root), "train", [])[:40]
    subsets = sorted({p.subset for p in pairs})
    data = RunData(subsets, encode_pairs(pairs, tokenizer, 256, subsets)[0])
    out = export_model(
        hf, tokenizer, tmp_path / "export", RunConfig(), Weights(2, 2), data, ExportOptions(normalize=normalize)
    )
    code = snippet((out / "README.md").read_text())
    assert ("reward_normalization" in code) == normalize

    # Expected, computed apart from the card: rm's RewardModel on each text alone.
    texts = [
        "\n\nHuman: What is 2 plus 3?\n\nAssistant: 2 plus 3 is 5.",
        "\n\nHuman: What is 2 plus 3?\n\nAssistant: 2 plus 3 is 7.",
    ]
    with torch.no_grad():
        ids = [torch.tensor([tokenizer(t)["input_ids"]]) for t in texts]
        raw = torch.stack([RewardModel(hf)(input_ids=i, attention_mask=torch.ones_like(i))[0] for i in ids])
    expected = raw
    if normalize:
        norm = hf.config.reward_normalization
        expected = (raw - norm["mean"]) / norm["std"]

    monkeypatch.chdir(out)
    namespace: dict = {}
    exec(compile(code, "README.md snippet", "exec"), namespace)
    assert torch.allclose(namespace["rewards"].double(), expected.double(), atol=1e-5, rtol=0)
    printed = capsys.readouterr().out
    assert f"'label': 'reward', 'score': {namespace['pipe'](texts[0])[0]['score']}" in printed
    assert namespace["pipe"](texts[0])[0]["score"] == pytest.approx(raw[0].item(), abs=1e-5)


def test_the_license_comes_from_export_license_and_the_card_asks_for_it_when_unset():
    card = render_card(RunConfig(), facts(step=1, final_step=1))
    assert "license" not in front_matter(card) and "# license: not set. Export with export.license=" in card
    licensed = render_card(load_config(overrides=["export.license=apache-2.0"]), facts(step=1, final_step=1))
    assert front_matter(licensed)["license"] == "apache-2.0" and "license: not set" not in licensed


def test_the_card_states_rms_truncation_rule_beside_the_tokenizers():
    """The exported tokenizer cuts tokens from the left (`truncation_side: left`); rm cuts a long prompt at its
    turns first (rm/tokens/truncation.py). The card says both, and that they differ only for prompts that do not fit."""
    card = render_card(RunConfig(), facts(step=1, final_step=1, max_length=512))
    text = " ".join(card.split())  # the rule as one sentence, whatever the line breaks
    assert "`model_max_length` is 512, the length trained on, and `truncation_side` is left" in text
    assert "loses whole leading turns first (the final question stays), then tokens from its left" in text
    assert "a response too long to fit even alone drops its pair in training and `rm eval`, and keeps its end" in text
    assert "the two differ only where a prompt does not fit beside its response in `max_length` tokens" in text


@pytest.mark.slow
def test_the_cards_example_is_a_held_out_pair_it_ranks_right_or_says_it_is_an_illustration(
    tokenizer, synthetic_root, tmp_path, monkeypatch
):
    """The fixed example (" 2 plus 3 is 5." against "7.") was ranked wrong by the demo model, and the card did not
    say it was only an illustration."""
    hf = tiny_model(tokenizer, seed=3)
    with torch.no_grad():
        hf.score.weight.normal_(0, 1.0)
    held = load_pairs(str(synthetic_root), "test", [])[:40]
    subsets = sorted({p.subset for p in held})
    data = RunData(subsets, [], encode_pairs(held, tokenizer, 256, subsets)[0])
    out = export_model(hf, tokenizer, tmp_path / "export", RunConfig(), Weights(2, 2), data)
    card = (out / "README.md").read_text()
    assert "A held-out pair of the run" in card and "An illustration" not in card
    monkeypatch.chdir(out)
    namespace: dict = {}
    exec(compile(snippet(card), "README.md snippet", "exec"), namespace)
    prompt, (chosen, rejected) = namespace["prompt"], namespace["responses"]
    assert any((p.prompt, p.chosen, p.rejected) == (prompt, chosen, rejected) for p in held)
    assert namespace["rewards"][0] > namespace["rewards"][1]

    bare = export_model(hf, tokenizer, tmp_path / "bare", RunConfig(), Weights(2, 2))  # no data: no example
    assert "# An illustration, not one of the run's pairs: this model may rank it either way." in (
        (bare / "README.md").read_text()
    )


@pytest.fixture(scope="session")
def listwise_run(tmp_path_factory):
    return card_runs.group_run(tmp_path_factory)


@pytest.fixture(scope="session")
def attribute_run(tmp_path_factory):
    return card_runs.attribute_run(tmp_path_factory)


def group_rows(result: dict) -> list[tuple[str, dict]]:
    return [*result["subsets"].items(), ("**overall**", result["overall"])]


@pytest.mark.slow
def test_the_card_of_a_plackett_luce_davidson_run_states_its_objective_nu_groups_and_ranking_metrics(listwise_run):
    """The card of such a run said Bradley-Terry, `-log sigmoid(r(chosen) - r(rejected))`, "32 pairs per process",
    no nu, no group metrics, "a tie counts half" (tied pairs are left out), and the asked-for vocab_size."""
    export = listwise_run / "export"
    card = (export / "README.md").read_text()
    saved, config = load_config(export / "rm_config.yaml"), json.loads((export / "config.json").read_text())
    result = json.loads((listwise_run / "eval.json").read_text())
    tags = front_matter(card)["tags"]
    assert "plackett-luce" in tags and "davidson-ties" in tags and "bradley-terry" not in tags
    assert "listwise Plackett-Luce reward modelling" in card and "pairwise Bradley-Terry" not in card
    assert "| objective | Plackett-Luce: -log prod_i exp(r_i) / sum_(j ranked at or below i) exp(r_j)" in card
    assert "sigmoid(r(chosen) - r(rejected))" not in card
    assert f"nu = {config['rm_davidson_nu']:.4g}, learned with the model (config.json `rm_davidson_nu`)" in card
    assert f"{saved.train.batch_size} groups per process" in card and "pairs per process" not in card
    tokenizer = AutoTokenizer.from_pretrained(export)
    assert len(tokenizer) < saved.tokenizer.vocab_size and f"vocabulary of {len(tokenizer)} tokens" in card
    overall = result["overall"]
    assert overall["groups"] > 0 and overall["tied_pairs"] > 0 and "a tie counts half" not in card
    assert f"Pairs the data ranks equal are left out of accuracy ({overall['tied_pairs']} tied pairs here" in card
    for name, m in group_rows(result):
        cells = [f"{m[k]:.4f}" for k in ("top1_accuracy", "best_of_k_accuracy", "kendall_tau")]
        row = next(line for line in card.splitlines() if line.startswith(f"| {name} | {m['groups']} | "))
        assert all(cell in row for cell in cells), (row, cells)


@pytest.mark.slow
def test_the_card_of_an_attribute_run_states_its_heads_their_loss_and_weight_and_the_reward_mix(attribute_run):
    export = attribute_run / "export"
    card = (export / "README.md").read_text()
    saved, config = load_config(export / "rm_config.yaml"), json.loads((export / "config.json").read_text())
    head, loss = saved.model.head, saved.loss
    names = ", ".join(f"`{n}`" for n in head.attributes)
    assert "attribute-regression" in front_matter(card)["tags"] and "bradley-terry" in front_matter(card)["tags"]
    assert f"| attributes | outputs 1..{len(head.attributes)} ({names}) regress the responses' ratings by " in card
    assert (
        "Gaussian negative log-likelihood" in card and f"weight {loss.attribute_coef:g} (`loss.attribute_coef`)" in card
    )
    mix = " + ".join(f"{w:g} * `{n}`" for n, w in head.reward_from_attributes.items())
    assert f"| reward | reward = {mix} (`model.head.reward_from_attributes`)" in card
    assert f"plus {loss.center_rewards_coef:g} * (r(chosen) + r(rejected))^2" in card
    assert all(f"(learned noise sigma {s:.4g})" in card for s in config["attribute_sigma"].values())
    assert f"{saved.train.batch_size} pairs per process" in card and "top-1 accuracy" not in card
    assert "a pair given two equal rewards counts half" in card


def test_the_objective_row_says_margin_soft_labels_and_a_fixed_nu_where_they_are_set():
    cfg = load_config(overrides=["loss.use_margin=true", "loss.strength=soft", "loss.strength_max=3"])
    card = render_card(cfg, facts(step=1, final_step=1))
    assert "Bradley-Terry: -log sigmoid(d), d = r(chosen) - r(rejected) - margin" in card
    assert "soft label p = 0.5 + s / (2 * 3)" in card and "soft-labels" in front_matter(card)["tags"]
    davidson = load_config(overrides=["loss.ties=davidson", "loss.davidson_nu=0.5"])
    fixed = render_card(davidson, facts(step=1, final_step=1))
    assert "nu = 0.5, fixed (`loss.davidson_nu`)" in fixed and "davidson-ties" in front_matter(fixed)["tags"]
