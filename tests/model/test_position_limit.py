"""A max_length past the model's position limit is an error naming both, in training, `rm eval` and `rm score`."""

from transformers import AutoConfig

from conftest import QUICKSTART, TINY_MODEL
from rm.cli import main as cli


def test_the_limit_is_the_key_the_class_declares_and_none_without_one():
    from rm.model.build import position_limit

    assert position_limit(AutoConfig.for_model("llama", max_position_embeddings=77)) == ("max_position_embeddings", 77)
    assert position_limit(AutoConfig.for_model("gpt2", n_positions=64)) == ("n_positions", 64)
    assert position_limit(AutoConfig.for_model("mamba", max_position_embeddings=77)) is None  # carried, not used


def test_training_refuses_a_max_length_past_the_positions(tmp_path, capsys):
    args = ["data.synthetic.n_train=40", "data.synthetic.n_eval=10", *TINY_MODEL, "train.max_steps=1"]
    args += ["collator.max_length=200", f"output_dir={tmp_path}", "train.report_to=[]"]  # quickstart: 128 positions
    assert cli(["train", str(QUICKSTART), *args]) == 2
    err = capsys.readouterr().err
    assert "error: collator.max_length=200 is above the model's position limit, max_position_embeddings=128" in err


def test_eval_and_score_refuse_a_max_length_past_the_positions(exported_tiny, synthetic_root, tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text('{"text": "hi"}\n')
    score = ["score", "--model", str(exported_tiny), "--input", str(tmp_path / "in.jsonl"), "--max-length", "5000"]
    evaluate = ["eval", "--model", str(exported_tiny), "--data", str(synthetic_root), "--max-length", "5000"]
    for args in (score, evaluate + ["--out", str(tmp_path / "eval")]):
        assert cli(args) == 2
        assert "--max-length=5000 is above the model's position limit, max_position_embeddings=1024" in (
            capsys.readouterr().err
        )
