import ast
import re
from pathlib import Path

import pytest
import yaml

from rm.config import RunConfig, load_config, save_config
from rm.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
# Run configs only: configs/accelerate/ holds launcher configs (where a run runs, not what it does)
# and configs/sweeps/ sweep files (loaded by tests/sweep/test_sweep_config.py).
LAUNCHERS = sorted((REPO / "configs" / "accelerate").glob("*.yaml"))
CONFIGS = sorted(p for p in (REPO / "configs").rglob("*.yaml") if p not in LAUNCHERS and p.parent.name != "sweeps")


def test_defaults_round_trip_through_yaml(tmp_path):
    cfg = load_config(None, ["train.lr=3e-4", "data.subsets=[a, b]", "model.trust_remote_code=true"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    assert again == cfg
    assert again.train.lr == pytest.approx(3e-4)
    assert again.data.subsets == ["a", "b"]
    assert again.model.trust_remote_code is True


def test_overrides_win_over_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("output_dir: /tmp/a\ntrain:\n  lr: 1.0e-3\n  batch_size: 4\n")
    cfg = load_config(path, ["train.lr=1e-4", "output_dir=/tmp/x"])
    assert cfg.train.lr == pytest.approx(1e-4)
    assert cfg.train.batch_size == 4
    assert cfg.output_dir == "/tmp/x"
    assert cfg.model == RunConfig().model  # untouched sections keep their defaults


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("train.lrr=1", "train.lrr"),
        ("model.random_init.hidden=3", "model.random_init.hidden"),
        ("nonsense=1", "unknown key nonsense"),
    ],
)
def test_unknown_keys_name_the_dotted_key(override, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        load_config(None, [override])


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("train.batch_size=eight", "train.batch_size: expected an integer"),
        ("train.batch_size=2.5", "train.batch_size: expected an integer"),
        ("train.lr=fast", "train.lr: expected a number"),
        ("model.trust_remote_code=1", "model.trust_remote_code: expected true or false"),
        ("data.subsets=harmless", "data.subsets: expected a list"),
        ("train=3", "train: expected a mapping"),
        ("train.scheduler=cosine_with_restarts", "train.scheduler"),
        ("train.batch_size=0", "train.batch_size: must be > 0"),
        ("train.lr=[", "override 'train.lr=[': the value is not valid YAML"),
        ("train.mixed_precision=no", "YAML reads a bare no as False, quote it: train.mixed_precision='no'"),
    ],
)
def test_wrong_types_and_values_name_the_dotted_key(override, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(None, [override])


def test_int_is_accepted_where_a_float_is_expected():
    assert load_config(None, ["train.lr=1"]).train.lr == 1.0


def test_yaml_file_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  epochs: many\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*train\.epochs"):
        load_config(path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_override_mistakes_name_the_override_not_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lr: 1.0e-3\n")
    with pytest.raises(ConfigError) as e:
        load_config(path, ["train.lr=1e-4", "train.learning_rate=1e-4"])
    assert str(e.value).startswith("override train.learning_rate=1e-4: unknown key train.learning_rate, did you")
    assert "run.yaml" not in str(e.value)
    with pytest.raises(ConfigError, match=r"^override train\.lr=fast: train\.lr: expected a number"):
        load_config(path, ["train.lr=fast"])


@pytest.mark.parametrize(
    ("override", "meant"),
    [
        ("train.learning_rate=1e-4", "train.lr"),  # transformers' and TRL's name
        ("train.max_length=128", "collator.max_length"),  # another section's key
        ("train.num_train_epochs=2", "train.epochs"),
        ("learning_rate=1e-4", "train.lr"),  # at the top level too
        ("train.lrr=1e-4", "train.lr"),  # a typo, as before
    ],
)
def test_an_unknown_key_names_the_one_meant(override, meant):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert f", did you mean {meant}? (known under" in str(e.value) and "\n" not in str(e.value)


def test_yaml_syntax_errors_are_one_line_with_file_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("output_dir: x\ntrain:\n  lr: [1\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == (
        f"{path}:4:1: not valid YAML (expected ',' or ']', but got '<stream end>', "
        "while parsing a flow sequence from line 3, column 7)"
    )


def test_yaml_is_read_with_the_safe_loader(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("output_dir: !!python/object/apply:os.getcwd []\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_every_field_is_documented():
    """Each config field has a docstring right under it: the dataclasses are the reference (schema.py and the
    sections split out of it, head_config.py, loss_config.py, ...)."""
    folder = Path(__file__).resolve().parents[2] / "rm" / "config"
    classes = [c for f in sorted(folder.glob("*.py")) for c in ast.parse(f.read_text()).body]
    sections = {c.name for c in classes if isinstance(c, ast.ClassDef) and c.name.endswith("Config")}
    undocumented = []
    for cls in (c for c in classes if isinstance(c, ast.ClassDef) and c.name in sections):
        body = cls.body
        for k, node in enumerate(body):
            if not isinstance(node, ast.AnnAssign):
                continue
            is_section = ast.unparse(node.annotation) in sections
            documented = k + 1 < len(body) and isinstance(body[k + 1], ast.Expr)
            if not (documented or is_section):
                undocumented.append(f"{cls.name}.{ast.unparse(node.target)}")
    assert len(sections) >= 8
    assert not undocumented


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_names_its_command(path):
    cfg = load_config(path)
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ") and ("python -m rm" in first or "accelerate launch" in first), first
    assert path.name in first
    assert cfg.output_dir


@pytest.mark.parametrize("path", LAUNCHERS, ids=lambda p: p.name)
def test_every_launcher_config_is_valid_for_accelerate_and_names_its_command(path):
    """Parsed by yaml.safe_load and by accelerate's own loader (which rejects unknown keys); the first
    line is the command that uses it, with a run config that exists and loads."""
    from accelerate.commands.config.config_args import load_config_from_file

    assert isinstance(yaml.safe_load(path.read_text()), dict)
    launcher = load_config_from_file(str(path))
    assert launcher.num_processes >= 1
    command = path.read_text().splitlines()[0]
    assert command.startswith(f"# accelerate launch --config_file configs/accelerate/{path.name} -m rm train "), command
    run_config = REPO / command.split()[-1]
    assert run_config.is_file() and load_config(run_config).output_dir


def test_the_launcher_configs_cover_cpu_one_gpu_ddp_fsdp_and_zero3():
    from accelerate.commands.config.config_args import load_config_from_file

    kinds = {p.stem: load_config_from_file(str(p)) for p in LAUNCHERS}
    assert {k: str(c.distributed_type.value) for k, c in kinds.items()} == {
        "cpu-ddp": "MULTI_GPU",  # torchrun; rm runs gloo on the CPU when no GPU is visible
        "two-machines-cpu": "MULTI_GPU",
        "cpu-fsdp": "FSDP",  # rm sets FSDP up on the CPU itself (rm/training/accelerator.py)
        "single-gpu": "NO",
        "multi-gpu-ddp": "MULTI_GPU",
        "fsdp": "FSDP",
        "deepspeed-zero3": "DEEPSPEED",
    }
    assert kinds["cpu-ddp"].num_processes == 2 and kinds["cpu-ddp"].mixed_precision == "no"
    assert kinds["deepspeed-zero3"].deepspeed_config["zero_stage"] == 3
    assert kinds["deepspeed-zero3"].deepspeed_config["zero3_save_16bit_model"] is True  # the end-of-run export
    assert kinds["fsdp"].fsdp_config["fsdp_version"] == 2


def test_mappings_take_dotted_keys_and_check_their_values(tmp_path):
    cfg = load_config(None, ["data.mixture.harmless-base=0.5", "data.columns={chosen: good, rejected: bad}"])
    assert cfg.data.mixture == {"harmless-base": 0.5} and cfg.data.columns == {"chosen": "good", "rejected": "bad"}
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    for override, fragment in [
        ("data.mixture.harmless-base=lots", r"data\.mixture\.harmless-base: expected a number"),
        ("data.mixture.harmless-base=-1", r"data\.mixture\.harmless-base: must be >= 0"),
        ("data.mixture=[1]", r"data\.mixture: expected a mapping"),
        ("data.columns.answer=x", r"data\.columns\.answer: rm's fields are"),
        ("data.format=xml", r"data\.format: 'xml' is not one of"),
        ("data.on_bad_record=ignore", r"data\.on_bad_record"),
        ("data.argilla.pairs_from_edits=yes please", r"data\.argilla\.pairs_from_edits: expected true or false"),
    ]:
        with pytest.raises(ConfigError, match=fragment):
            load_config(None, [override])


@pytest.mark.parametrize(
    "override, key, value",
    [
        ("train.lr=.nan", "train.lr", "nan"),  # passed here once, then ended in torch's traceback
        ("train.max_grad_norm=.inf", "train.max_grad_norm", "inf"),
        ("data.eval_fraction=.nan", "data.eval_fraction", "nan"),  # one line for it, not "must be in (0, 1)" too
        ("data.mixture.harmless-base=-.inf", "data.mixture.harmless-base", "-inf"),
        ("loss.davidson_nu=.nan", "loss.davidson_nu", "nan"),
    ],
)
def test_a_non_finite_number_fails_the_check_in_one_line_naming_its_key(override, key, value):
    with pytest.raises(ConfigError) as bad:
        load_config(None, [override])
    assert str(bad.value) == f"invalid config:\n  {key}: must be a finite number, got {value}"


def test_libyamls_parser_reads_every_shipped_yaml_as_the_python_parser_does(tmp_path):
    """read_yaml parses with libyaml where PyYAML has it (a run's config in 0.46 ms rather than 4.1): the same
    mapping as the pure-Python parser for every YAML file rm ships and for floats without a dot. (A refused file is
    read again by the pure-Python parser: test_yaml_syntax_errors_are_one_line_with_file_line_and_column pins its
    words.)"""
    from rm.config.loader import FastYamlLoader, YamlLoader, read_yaml

    assert FastYamlLoader is not YamlLoader and getattr(yaml, "__with_libyaml__", False)
    files = sorted((REPO / "configs").rglob("*.yaml"))
    assert len(files) >= 5
    dotless = tmp_path / "dotless.yaml"
    dotless.write_text("train:\n  lr: 1e-4\n  eps: -2E+3\n  name: 1e\n")
    for path in [*files, dotless]:
        assert read_yaml(path) == (yaml.load(path.read_text(), Loader=YamlLoader) or {}), path
    assert read_yaml(dotless)["train"] == {"lr": 1e-4, "eps": -2000.0, "name": "1e"}
