"""The Python API: `import rm` stays light, `rm.train` takes configs and data in memory, `rm.load(...).score` gives
`rm score`'s rewards and `evaluate` `rm eval`'s eval.json. One tiny run (two steps) is shared by the module."""

import gzip
import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch

import rm
from conftest import QUICKSTART, REPO, SHORT
from rm.cli import main as cli_main
from rm.config.rundir import RunDir, read_manifest
from rm.errors import ConfigError, DataError, ModelError
from rm.training.ownership import proof


def records(root, split: str, n: int) -> list[dict]:
    """The first `n` records of a split of the generated data, across its subsets."""
    rows = []
    for path in sorted(root.glob(f"*/{split}.jsonl.gz")):
        rows += [json.loads(line) for line in gzip.open(path, "rt")][: n // 3 + 1]
    return rows[:n]


@pytest.fixture(scope="module")
def run(synthetic_root, tmp_path_factory):
    """rm.train on a YAML path with dotted overrides, train data as a list of records, eval data as a Dataset."""
    from datasets import Dataset

    out = tmp_path_factory.mktemp("api") / "run"
    eval_data = Dataset.from_list(records(synthetic_root, "test", 16))
    overrides = [*SHORT, f"output_dir={out}"]
    return rm.train(
        QUICKSTART, train_data=records(synthetic_root, "train", 48), eval_data=eval_data, overrides=overrides
    )


@pytest.fixture(scope="module")
def model(run):
    return rm.load(run.export)


@pytest.mark.slow
def test_import_rm_loads_neither_torch_nor_transformers_until_train_or_load_is_read():
    code = textwrap.dedent(
        """
        import sys
        import rm, rm.client
        heavy = ("torch", "transformers")
        assert not any(m.split(".")[0] in heavy for m in sys.modules), "imported at `import rm`"
        assert rm.__all__ == ["__version__", "load", "train"] and rm.__version__
        try:
            rm.nothing
        except AttributeError as e:
            assert "nothing" in str(e)
        assert callable(rm.train) and callable(rm.load)
        assert "torch" in sys.modules
        """
    )
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
def test_train_returns_the_run_and_its_eval_and_the_data_files_are_the_runs_own(run):
    root = RunDir(run.run_dir)
    assert run.metrics["overall"]["n"] == 16 and run.metrics["train"]["steps"] == 2
    assert json.loads(root.eval_json.read_text())["overall"]["n"] == 16
    assert run.export == root.export and (root.export / "model.safetensors").is_file()
    assert (root.data / "train.jsonl").is_file() and (root.data / "test.jsonl").is_file()
    assert len((root.data / "train.jsonl").read_text().splitlines()) == 48
    # recorded in the manifest as the run wrote them: what train.overwrite may delete
    assert {"data/train.jsonl", "data/test.jsonl"} <= set(read_manifest(root.root)["files"])
    assert proof(root).unproven == []


def test_score_gives_the_rewards_rm_score_writes_for_every_record_shape(model, run, tmp_path):
    inputs = [
        {"text": "\n\nHuman: What is 2 + 3?\n\nAssistant: 5."},
        {"prompt": "\n\nHuman: What is 2 + 3?\n\nAssistant:", "response": " 5."},
        {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello!", "rejected": "\n\nHuman: Hi\n\nAssistant: Go away."},
        {"prompt": "\n\nHuman: 2+2?\n\nAssistant:", "responses": [{"text": " 4"}, {"text": " 5"}, {"text": " 22"}]},
        {"chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
         "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "No"}]},
    ]  # fmt: skip
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in inputs))
    assert cli_main(["score", "--model", str(run.export), "--input", str(src), "--out", str(tmp_path / "o.jsonl")]) == 0
    written = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    got = model.score(inputs)
    assert len(got) == len(written)
    for fields, line in zip(got, written, strict=True):
        assert fields.keys() == line.keys() - inputs[written.index(line)].keys()
        for key, value in fields.items():
            assert value == pytest.approx(line[key], abs=1e-5), key
    # a text alone, a list of texts and a record alone: the same numbers, shaped as given
    assert model.score(inputs[0]["text"]) == pytest.approx(written[0]["reward"], abs=1e-5)
    assert model.score([inputs[0]["text"]]) == pytest.approx([written[0]["reward"]], abs=1e-5)
    assert model.score(inputs[3])["rewards"] == pytest.approx(written[3]["rewards"], abs=1e-5)


@pytest.mark.slow
def test_evaluate_is_rm_eval_and_score_gives_its_rewards(model, run, synthetic_root, tmp_path):
    test = RunDir(run.run_dir).data / "test.jsonl"
    assert cli_main(["eval", "--model", str(run.export), "--data", str(test), "--out", str(tmp_path / "cli")]) == 0
    saved = json.loads((tmp_path / "cli" / "eval.json").read_text())
    result = json.loads(json.dumps(model.evaluate(str(test), out=tmp_path / "api")).replace("NaN", "null"))
    for block in (saved, result):
        block["eval"].pop("seconds")
    assert result == saved
    # in memory, the same records give the same metrics
    in_memory = model.evaluate([json.loads(line) for line in test.read_text().splitlines()])
    assert in_memory["overall"]["accuracy"] == saved["overall"]["accuracy"]
    rows = [json.loads(line) for line in (tmp_path / "cli" / "rewards.jsonl").read_text().splitlines()]
    scored = model.score([json.loads(line) for line in test.read_text().splitlines()])
    for row, fields in zip(rows, scored, strict=True):
        got, want = (fields["chosen_reward"], fields["rejected_reward"]), (row["chosen_reward"], row["rejected_reward"])
        assert got == pytest.approx(want, abs=1e-5)


def test_a_run_directory_and_its_final_checkpoint_load_as_its_export(model, run):
    texts = ["\n\nHuman: Hi\n\nAssistant: Hello!", "\n\nHuman: 2+2?\n\nAssistant: 4"]
    expected = model.score(texts)
    assert rm.load(run.run_dir).score(texts) == pytest.approx(expected, abs=1e-5)
    assert rm.load(RunDir(run.run_dir).checkpoint(2)).score(texts) == pytest.approx(expected, abs=1e-5)


@pytest.mark.slow
def test_a_loaded_model_is_trained_in_place_of_the_configs(synthetic_root, tmp_path):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, num_labels=1,
    )  # fmt: skip
    given = LlamaForSequenceClassification(config)
    before = given.score.weight.detach().clone()
    config = {"output_dir": str(tmp_path / "run"), "data": {"source": str(synthetic_root)}}
    result = rm.train(
        config,
        model=given,
        overrides=[*SHORT[2:], "collator.max_length=128", "data.max_train_pairs=48", "data.max_eval_pairs=16"],
    )
    assert not torch.equal(given.score.weight.detach(), before)  # this very object was trained
    assert result.metrics["overall"]["n"] == 16 and math.isfinite(result.metrics["overall"]["accuracy"])
    exported = json.loads((result.export / "config.json").read_text())
    assert exported["architectures"] == ["LlamaForSequenceClassification"] and exported["hidden_size"] == 32


def test_mistakes_raise_one_line_rm_errors_before_anything_is_written(tmp_path, monkeypatch):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"override train\.learning_rate=1"):
        rm.train(
            {"output_dir": str(out)}, train_data=[{"chosen": "a", "rejected": "b"}], overrides=["train.learning_rate=1"]
        )
    with pytest.raises(ConfigError, match=r"config \(a dict\): .*trian"):
        rm.train({"output_dir": str(out), "trian": {}})
    with pytest.raises(ConfigError, match=r"train_data\[1\]: a record must be a dict"):
        rm.train({"output_dir": str(out)}, train_data=[{"chosen": "a", "rejected": "b"}, "text"])
    with pytest.raises(ConfigError, match=r"eval_data needs train_data"):
        rm.train({"output_dir": str(out)}, eval_data=[{"chosen": "a", "rejected": "b"}])
    with pytest.raises(ConfigError, match=r"train_data: expected a path, a datasets.Dataset"):
        rm.train({"output_dir": str(out)}, train_data=42)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="cannot be handed to 2 processes"):
        rm.train({"output_dir": str(out)}, model=torch.nn.Linear(2, 1))
    assert not out.exists()


def test_a_model_without_a_score_head_or_with_other_outputs_is_refused(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    from rm.config import ModelConfig
    from rm.model.build import given_model

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    with pytest.raises(ModelError, match="LlamaForCausalLM has no linear `score` head.*num_labels=1"):
        given_model(LlamaForCausalLM(config), ModelConfig(), 64, 0)
    config.num_labels = 3
    with pytest.raises(ModelError, match=r"3 outputs \(config.num_labels\), rm trains 1"):
        given_model(LlamaForSequenceClassification(config), ModelConfig(), 64, 0)


def test_a_bad_record_to_score_is_named(model):
    with pytest.raises(DataError, match=r"input\[1\]: field 'chosen'"):
        model.score([{"text": "fine"}, {"chosen": 3, "rejected": "x"}])
