"""End to end: a tiny run on generated data writes every file it promises, learns, and exports a
model that plain transformers loads and scores exactly as training did."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from accelerate.utils import set_seed
from safetensors.torch import load_file
from transformers import AutoConfig, AutoTokenizer

from conftest import QUICKSTART, REPO, TINY, plain_transformers_rewards
from rm.config import load_config
from rm.data.load import load_pairs
from rm.model.build import build_model
from rm.training.run import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = load_config(QUICKSTART, TINY + [f"output_dir={out}"])
    return out, cfg, main(cfg)


def test_run_writes_every_promised_file(run):
    out, cfg, result = run
    assert load_config(out / "config.yaml") == cfg
    for name in ["eval.json", "train_log.jsonl", "tokenizer/tokenizer.json", "checkpoints/step-10"]:
        assert (out / name).exists(), name
    assert list(out.rglob("events.out.tfevents.*")), "no tensorboard log"
    export = out / "export"
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "rm_config.yaml"]:
        assert (export / name).is_file(), name
    assert not list(export.glob("*.bin")) and not list(export.glob("*.pt"))
    config = AutoConfig.from_pretrained(export)
    assert config.num_labels == 1 and config.id2label == {0: "reward"}
    assert config.pad_token_id == AutoTokenizer.from_pretrained(export).pad_token_id
    assert yaml.safe_load((export / "rm_config.yaml").read_text())["output_dir"] == str(out)


def test_eval_json_has_the_documented_shape(run):
    out, cfg, result = run
    saved = json.loads((out / "eval.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert isinstance(saved["overall"]["accuracy"], float) and saved["overall"]["n"] == 61
    assert set(saved["subsets"]) == {"harmless", "helpful-arithmetic", "helpful-recall"}
    assert sum(m["n"] for m in saved["subsets"].values()) == 61  # every eval pair counted once
    assert all(0.0 <= m["accuracy"] <= 1.0 and isinstance(m["n"], int) for m in saved["subsets"].values())
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [4, 8, 12]


def test_training_changed_the_parameters_and_lr_zero_does_not(run, tmp_path):
    out, cfg, _ = run
    tokenizer = AutoTokenizer.from_pretrained(out / "export")

    def initial_weights():
        set_seed(cfg.train.seed)
        model = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
        return model.state_dict()

    trained = load_file(out / "export" / "model.safetensors")
    init = initial_weights()
    changed = [k for k in trained if not torch.equal(trained[k], init[k])]
    assert len(changed) == len(trained), f"unchanged: {set(trained) - set(changed)}"

    # The same run with lr 0 exports exactly the initial weights: the reference above is the real init.
    frozen = tmp_path / "frozen"
    main(load_config(QUICKSTART, TINY + [f"output_dir={frozen}", "train.lr=0", "train.max_steps=2"]))
    still = load_file(frozen / "export" / "model.safetensors")
    assert all(torch.equal(still[k], init[k]) for k in still)


def test_export_scores_like_the_training_time_model(run):
    """Plain transformers on the exported folder reproduces the rewards behind eval.json."""
    out, cfg, result = run
    pairs = load_pairs(str(out / "data"), "test", [])
    chosen = plain_transformers_rewards(out / "export", [p.prompt + p.chosen for p in pairs]).double()
    rejected = plain_transformers_rewards(out / "export", [p.prompt + p.rejected for p in pairs]).double()
    assert chosen.mean().item() == pytest.approx(result["overall"]["mean_chosen_reward"], abs=1e-5)
    assert rejected.mean().item() == pytest.approx(result["overall"]["mean_rejected_reward"], abs=1e-5)
    accuracy = ((chosen > rejected).double() + 0.5 * (chosen == rejected).double()).mean().item()
    assert accuracy == pytest.approx(result["overall"]["accuracy"], abs=1e-9)


def test_accelerate_launch_one_cpu_process(tmp_path):
    out = tmp_path / "launched"
    accelerate = Path(sys.executable).parent / "accelerate"
    cmd = [str(accelerate), "launch", "--num_processes", "1", "--cpu", "-m", "rm", "train", str(QUICKSTART)]
    cmd += TINY + ["train.max_steps=3", "train.report_to=[]", "export.enabled=false", f"output_dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "eval.json").read_text())["overall"]["n"] == 61
    assert "held-out accuracy after 3 steps" in proc.stdout


def test_cli_reports_config_errors_with_the_dotted_key():
    proc = subprocess.run(
        [sys.executable, "-m", "rm", "train", str(QUICKSTART), "train.lrr=1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert "unknown key train.lrr" in proc.stderr


def test_shared_packed_and_padded_layouts_train_the_same_model(tmp_path):
    """Same pairs in the same micro-batches, three layouts: the loss curves and weights agree (fp32)."""
    common = TINY + ["train.max_steps=8", "train.log_steps=1", "train.report_to=[]", "train.eval_steps=0"]
    common += ["train.save_steps=0"]
    logs, weights = {}, {}
    for layout in ("shared", "packed", "padded"):
        main(load_config(QUICKSTART, common + [f"collator.layout={layout}", f"output_dir={tmp_path / layout}"]))
        rows = (tmp_path / layout / "train_log.jsonl").read_text().splitlines()
        logs[layout] = [json.loads(r)["loss"] for r in rows]
        weights[layout] = load_file(tmp_path / layout / "export" / "model.safetensors")
    assert len(logs["shared"]) == 8
    for layout in ("shared", "packed"):
        assert logs[layout] == pytest.approx(logs["padded"], abs=1e-4)
        for k, w in weights["padded"].items():
            assert torch.allclose(weights[layout][k], w, atol=1e-4), (layout, k)


def test_rm_eval_on_the_export_reproduces_the_runs_eval_json(run, tmp_path):
    """`python -m rm eval` (its in-process entry) on the exported folder gives training's numbers."""
    from rm.config import DataConfig
    from rm.evaluation.eval_report import EvalOptions
    from rm.evaluation.eval_report import evaluate_model as rm_eval

    out, cfg, result = run
    got = rm_eval(str(out / "export"), DataConfig(source=str(out / "data")), tmp_path / "eval", EvalOptions())
    assert got["overall"]["n"] == result["overall"]["n"]
    assert got["overall"]["accuracy"] == pytest.approx(result["overall"]["accuracy"], abs=1e-9)
    for name, m in result["subsets"].items():
        assert got["subsets"][name]["n"] == m["n"]
        assert got["subsets"][name]["accuracy"] == pytest.approx(m["accuracy"], abs=1e-9)
        assert got["subsets"][name]["mean_margin"] == pytest.approx(m["mean_margin"], abs=1e-5)


def test_a_second_run_into_a_finished_runs_directory_is_refused(tmp_path, capsys):
    """Not a silent overwrite of eval.json, export/ and config.yaml with both runs' TensorBoard events
    mixed: one line saying what to do, naming only what works (train.resume=auto of a finished run has
    nothing to resume); train.overwrite=true clears the earlier run first."""
    from rm.cli import main as cli

    small = TINY[:-5] + ["train.max_steps=2", "train.report_to=[tensorboard]", f"output_dir={tmp_path}"]
    assert cli(["train", str(QUICKSTART), *small]) == 0
    before = (tmp_path / "eval.json").read_text()
    events = set(tmp_path.rglob("events.out.tfevents.*"))
    assert events
    capsys.readouterr()
    assert cli(["train", str(QUICKSTART), *small, "train.lr=1e-2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"error: output_dir={tmp_path} already holds a run that finished at step 2 (config.yaml, eval.json"
    )
    assert err.endswith("use another output_dir, or replace it with train.overwrite=true"), err
    assert len(err.splitlines()) == 1 and (tmp_path / "eval.json").read_text() == before
    assert load_config(tmp_path / "config.yaml").train.lr == 3e-3

    assert cli(["train", str(QUICKSTART), *small, "train.lr=1e-2", "train.overwrite=true"]) == 0
    assert load_config(tmp_path / "config.yaml").train.lr == 1e-2
    after = set(tmp_path.rglob("events.out.tfevents.*"))
    assert after and not after & events  # the earlier run's events are gone


def test_an_output_dir_that_cannot_be_written_is_one_line(tmp_path, capsys):
    from rm.cli import main as cli

    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out, says in [(a_file, "is a file, not a directory"), (a_file / "run", "cannot write there")]:
        assert cli(["train", str(QUICKSTART), f"output_dir={out}"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: output_dir={out}: {says}") and len(err.splitlines()) == 1, err
    if Path("/sys").is_dir():  # not writable even by root
        assert cli(["train", str(QUICKSTART), "output_dir=/sys/rm-test-run"]) == 2
        assert "error: output_dir=/sys/rm-test-run: cannot write there" in capsys.readouterr().err


def test_log_lines_stay_off_the_progress_bar_and_checkpoints_are_quiet(tmp_path):
    """In a terminal (or a log file) each eval line starts a line of its own instead of being appended to
    the bar's, and a checkpoint adds no accelerate `[RANK 0]` lines."""
    overrides = TINY + ["train.report_to=[]", "export.enabled=false", f"output_dir={tmp_path}"]
    proc = subprocess.run(
        [sys.executable, "-m", "rm", "train", str(QUICKSTART), *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[RANK" not in proc.stderr and proc.stderr.count("checkpoint: ") == 1  # rm's own one line
    evals = [line for line in proc.stderr.split("\n") if "eval accuracy" in line]
    assert evals and all(line.rsplit("\r", 1)[-1].startswith("step ") for line in evals), evals


def test_runs_in_one_process_may_change_mixed_precision(tmp_path):
    """accelerate keeps one state per process: an in-process sweep trying fp32 then bf16 must not be refused."""
    common = [*TINY, "train.max_steps=2", "train.eval_steps=0", "train.save_steps=0", "train.report_to=[]"]
    common += ["export.enabled=false"]
    first = main(load_config(QUICKSTART, common + ["train.mixed_precision='no'", f"output_dir={tmp_path / 'fp32'}"]))
    second = main(load_config(QUICKSTART, common + ["train.mixed_precision=bf16", f"output_dir={tmp_path / 'bf16'}"]))
    assert first["overall"]["n"] == second["overall"]["n"] == 61
    assert first["overall"]["mean_margin"] != second["overall"]["mean_margin"]  # bf16 really was used
