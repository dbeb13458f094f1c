"""A process reward model learns which steps are wrong: on the repo's generated stepwise data (a step is wrong when
it holds a marker word; a problem's solutions share its prompt), a tiny random-init model trained by `rm train`
judges held-out solutions' first errors with ProcessBench's F1 >= 0.9 (eval.json's `steps` block), and its export,
read by plain transformers as a token classifier by the card's rule, judges them alike."""

import gzip
import json

import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

from conftest import QUICKSTART
from rm.config import load_config
from rm.data.steps.step_problems import write_step_dataset
from rm.evaluation.steps.processbench import ProcessBenchItem, processbench_scores
from rm.tokens.steps.step_tokens import encode_steps
from rm.tokens.tokenizer import special_prefix
from rm.training.run import main

STEP_RUN = [
    "model.random_init.max_position_embeddings=512", "collator.max_length=512", "train.batch_size=16",
    "train.epochs=1", "train.eval_steps=0", "data.cache=false",
]  # fmt: skip


@pytest.mark.slow
def test_a_tiny_model_finds_the_first_wrong_step(tmp_path):
    data = write_step_dataset(tmp_path / "data", n_train=600, n_test=100, seed=0, k=4)["train"].parent.parent
    run = tmp_path / "run"
    main(load_config(QUICKSTART, [*STEP_RUN, f"data.source={data}", f"output_dir={run}"]))
    steps = json.loads((run / "eval.json").read_text())["steps"]["overall"]
    print({k: steps[k] for k in ("step_accuracy", "step_auc", "first_error", "n_steps", "n_solutions")})
    assert steps["n_solutions"] == 400 and steps["first_error"]["n_erroneous"] == 200
    assert steps["first_error"]["f1"] >= 0.9
    assert steps["best_of_n"]["min"]["accuracy"] >= steps["best_of_n"]["min"]["chance"]
    card = (run / "export" / "README.md").read_text()
    assert "# Process reward model (LlamaForTokenClassification)" in card and "'\\n\\n'" in card
    exported = exported_first_errors(run / "export", data / "steps" / "test.jsonl.gz")
    assert exported == pytest.approx(steps["first_error"], abs=1e-12)


def exported_first_errors(folder, test_file) -> dict:
    """ProcessBench's numbers of the held-out solutions scored by plain transformers from the export alone."""
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    separator = model.config.rm_step_separator
    items = []
    for line in gzip.open(test_file, "rt"):
        record = json.loads(line)
        ids = encode_steps(
            tokenizer, record["prompt"], [record["completions"]], separator, 0, special_prefix(tokenizer)
        )
        tokens = [*ids.group.prompt_ids, *ids.group.response_ids[0].tolist()]
        ends = [len(ids.group.prompt_ids) + e for e in ids.group.step_ends[0]]
        with torch.no_grad():
            probs = model(input_ids=torch.tensor([tokens])).logits[0].softmax(-1)[ends, 1]
        label = next((i for i, good in enumerate(record["labels"]) if not good), -1)
        items.append(ProcessBenchItem("all", label, probs.tolist()))
    return processbench_scores(items)["splits"]["all"]


def test_a_stepwise_run_of_a_model_with_no_token_classifier_stops_before_training(tmp_path):
    from rm.errors import ExportError

    data = write_step_dataset(tmp_path / "data", n_train=8, n_test=2, seed=0, k=2)["train"].parent.parent
    run = [*STEP_RUN, f"data.source={data}", f"output_dir={tmp_path / 'run'}", "model.random_init.model_type=granite"]
    with pytest.raises(ExportError, match="no token-classification class for 'granite'.*export.enabled=false"):
        main(load_config(QUICKSTART, run))
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "export").exists()
    main(load_config(QUICKSTART, [*run, "export.enabled=false", "train.max_steps=1"]))  # trains without an export
