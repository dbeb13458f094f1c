"""`python -m rm export` on a real run: its checkpoints (written by accelerator.save_state) and its
final weights become the same folder as the end-of-run export, and score like training did."""

import json

import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from conftest import REPO, TINY_MODEL
from rm.cli import main as cli
from rm.config import load_config, save_config
from rm.data.load import load_pairs
from rm.errors import ExportError
from rm.export.folder import export_run
from rm.training.run import main as train

QUICKSTART = REPO / "configs" / "quickstart.yaml"
TINY = [
    "data.synthetic.n_train=150",
    "data.synthetic.n_eval=40",
    *TINY_MODEL,
    "train.batch_size=8",
    "train.max_steps=6",
    "train.save_steps=3",
    "train.eval_steps=0",
    "train.log_steps=3",
    "train.lr=3e-3",
    "train.report_to=[]",
    "export.normalize=true",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    train(load_config(QUICKSTART, TINY + [f"output_dir={out}"]))
    return out


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def rewards(folder, texts: list[str]) -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return torch.cat(
            [
                model(**tokenizer(texts[i : i + 64], return_tensors="pt", padding=True)).logits[:, 0]
                for i in range(0, len(texts), 64)
            ]
        ).double()


@pytest.mark.slow
def test_the_last_checkpoint_and_the_run_export_to_the_end_of_run_folder_byte_for_byte(run, tmp_path):
    end_of_run = files(run / "export")
    assert set(end_of_run) == {
        "README.md",
        "chat_template.jinja",
        "config.json",
        "eval.json",
        "model.safetensors",
        "rm_config.yaml",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    assert cli(["export", str(run / "checkpoints" / "step-6"), "--out", str(tmp_path / "ckpt")]) == 0
    assert files(tmp_path / "ckpt") == end_of_run
    assert cli(["export", str(run), "--out", str(tmp_path / "run")]) == 0
    assert files(tmp_path / "run") == end_of_run


def test_the_export_reproduces_eval_json_with_plain_transformers(run):
    """Scoring the run's held-out pairs with the exported folder gives eval.json's accuracy and means."""
    result = json.loads((run / "eval.json").read_text())
    assert json.loads((run / "export" / "eval.json").read_text()) == result
    pairs = load_pairs(str(run / "data"), "test", [])
    chosen = rewards(run / "export", [p.prompt + p.chosen for p in pairs])
    rejected = rewards(run / "export", [p.prompt + p.rejected for p in pairs])
    for subset, m in result["subsets"].items():
        mask = torch.tensor([p.subset == subset for p in pairs])
        c, r = chosen[mask], rejected[mask]
        assert m["n"] == len(c)
        assert ((c > r).double() + 0.5 * (c == r).double()).mean().item() == pytest.approx(m["accuracy"], abs=1e-12)
        assert c.mean().item() == pytest.approx(m["mean_chosen_reward"], abs=1e-5)
        assert r.mean().item() == pytest.approx(m["mean_rejected_reward"], abs=1e-5)
    card = (run / "export" / "README.md").read_text()
    for subset, m in result["subsets"].items():
        assert f"| {subset} | {m['n']} | {m['accuracy']:.4f} |" in card


@pytest.mark.slow
def test_normalised_training_rewards_have_mean_zero_and_std_one(run):
    norm = json.loads((run / "export" / "config.json").read_text())["reward_normalization"]
    pairs = load_pairs(str(run / "data"), "train", [])
    raw = rewards(run / "export", [p.prompt + p.chosen for p in pairs] + [p.prompt + p.rejected for p in pairs])
    z = (raw - norm["mean"]) / norm["std"]
    assert norm["n_rewards"] == 2 * len(pairs) == 300 and norm["data"] == "150 training pairs of synthetic"
    assert z.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert z.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-5)


def test_an_intermediate_checkpoint_exports_its_own_weights_and_no_borrowed_eval(run, tmp_path):
    out = export_run(run / "checkpoints" / "step-3", tmp_path / "step3", normalize=False)
    saved = load_file(run / "checkpoints" / "step-3" / "model.safetensors")
    exported = load_file(out / "model.safetensors")
    assert {"hf." + k for k in exported} == set(saved)
    assert all(torch.equal(exported[k], saved["hf." + k]) for k in exported)
    final = load_file(run / "export" / "model.safetensors")
    assert not torch.equal(exported["score.weight"], final["score.weight"])
    assert not (out / "eval.json").exists()
    assert "reward_normalization" not in json.loads((out / "config.json").read_text())
    card = (out / "README.md").read_text()
    assert "an intermediate checkpoint, after 3 optimizer steps of the run's 6" in card
    assert "Not evaluated" in card and "| **overall** |" not in card


@pytest.mark.slow
def test_eval_at_export_scores_the_held_out_pairs_with_the_checkpoint(run, tmp_path):
    out = export_run(run / "checkpoints" / "step-3", tmp_path / "step3", evaluate=True)
    result = json.loads((out / "eval.json").read_text())
    assert result["exported_step"] == 3 and result["overall"]["n"] == 40
    pairs = load_pairs(str(run / "data"), "test", [])
    chosen = rewards(out, [p.prompt + p.chosen for p in pairs])
    rejected = rewards(out, [p.prompt + p.rejected for p in pairs])
    assert chosen.mean().item() == pytest.approx(result["overall"]["mean_chosen_reward"], abs=1e-5)
    assert rejected.mean().item() == pytest.approx(result["overall"]["mean_rejected_reward"], abs=1e-5)
    accuracy = ((chosen > rejected).double() + 0.5 * (chosen == rejected).double()).mean().item()
    assert accuracy == pytest.approx(result["overall"]["accuracy"], abs=1e-12)
    assert "scored when this folder was exported" in (out / "README.md").read_text()


def test_a_lora_checkpoint_written_by_save_state_is_merged_with_its_trained_head(run, tokenizer, tmp_path):
    """What a LoRA run leaves: save_state of the wrapper holding a PeftModel, and peft's adapter_config.json."""
    from peft import LoraConfig, get_peft_model

    lora_run = tmp_path / "lora-run"
    cfg = load_config(
        QUICKSTART,
        TINY[:5] + ["model.random_init.num_hidden_layers=2", f"output_dir={lora_run}", "export.normalize=false"],
    )
    lora_run.mkdir()
    save_config(cfg, lora_run / "config.yaml")
    tokenizer.save_pretrained(lora_run / "tokenizer")
    torch.manual_seed(0)
    from rm.model.build import build_model

    hf = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    peft_model = get_peft_model(
        hf, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], modules_to_save=["score"])
    )
    with torch.no_grad():  # as if trained: LoRA B away from zero, the head's copy away from the original
        for name, p in peft_model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.add_(torch.randn_like(p) * 0.5)

    class Wrapper(torch.nn.Module):  # the shape of rm's RewardModel: the HF (here peft) model as `.hf`
        def __init__(self, hf):
            super().__init__()
            self.hf = hf

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(Wrapper(peft_model))
    checkpoint = lora_run / "checkpoints" / "step-1"
    accelerator.save_state(str(checkpoint))
    peft_model.peft_config["default"].save_pretrained(str(checkpoint))
    accelerator.free_memory()

    texts = ["\n\nHuman: What is 2 plus 3?\n\nAssistant: 5.", "\n\nHuman: Hi there!\n\nAssistant: Hello!"]
    with torch.no_grad():
        expected = torch.stack(
            [peft_model(input_ids=torch.tensor([tokenizer(t)["input_ids"]])).logits[0, 0] for t in texts]
        )
    out = export_run(checkpoint, tmp_path / "export")
    got = rewards(out, texts).float()
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)
    head = load_file(out / "model.safetensors")["score.weight"]
    assert torch.equal(head, peft_model.base_model.model.score.modules_to_save["default"].weight)

    (checkpoint / "adapter_config.json").unlink()
    with pytest.raises(ExportError, match="adapter_config.json"):
        export_run(checkpoint, tmp_path / "again")


def test_bad_sources_fail_with_the_path_and_the_reason(run, tmp_path, capsys):
    assert cli(["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2
    assert "not a directory" in capsys.readouterr().err
    broken = tmp_path / "broken" / "checkpoints" / "step-1"
    broken.mkdir(parents=True)
    (broken / "optimizer.bin").write_bytes(b"")
    (tmp_path / "broken" / "config.yaml").write_text((run / "config.yaml").read_text())
    assert cli(["export", str(broken), "--out", str(tmp_path / "x")]) == 2
    assert "no model.safetensors (found: optimizer.bin)" in capsys.readouterr().err
    assert cli(["export", str(run), "--out", str(run / "export")]) == 2
    assert "not empty; pass --overwrite" in capsys.readouterr().err
    assert cli(["export", str(run), "--out", str(tmp_path / "y"), "--revision", "dev"]) == 2
    assert "only apply with --push-to-hub" in capsys.readouterr().err


@pytest.mark.slow
def test_export_and_push_from_the_command_line_never_writes_the_token(run, tmp_path, monkeypatch, capsys, caplog):
    from huggingface_hub import HfApi

    token = "hf_rmTestTokenNeverWrittenAnywhere4567"
    monkeypatch.setenv("HF_TOKEN", token)
    calls = []
    for name in ("create_repo", "create_branch", "upload_folder"):
        monkeypatch.setattr(HfApi, name, lambda self, *a, _n=name, **k: calls.append((_n, a, k)))
    out = tmp_path / "pushed"
    argv = ["export", str(run), "--out", str(out), "--push-to-hub", "me/tiny-rm", "--private", "--revision", "v1"]
    assert cli(argv) == 0
    assert [c[0] for c in calls] == ["create_repo", "create_branch", "upload_folder"]
    assert calls[2][2]["folder_path"] == str(out) and calls[2][2]["revision"] == "v1"
    card = (out / "README.md").read_text()
    assert 'model_id = "me/tiny-rm"' in card  # the pushed card loads from the Hub repo
    assert (
        card.replace('"me/tiny-rm"  # the Hub repository', '"."  # this folder (run from inside it)')
        == (run / "export" / "README.md").read_text()
    )
    printed = capsys.readouterr()
    texts = [p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file()]
    texts += [p.read_bytes().decode("latin-1") for p in run.rglob("*") if p.is_file()]
    assert not any(token in t for t in texts + [printed.out, printed.err, caplog.text])
