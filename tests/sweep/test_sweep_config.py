"""Sweep files: typed like run configs, every problem named by its dotted key, every shipped sweep loads."""

import ast
from pathlib import Path

import pytest

from conftest import REPO
from rm.config import build, parse_override
from rm.errors import ConfigError
from rm.sweep.config import ParamSpec, SweepConfig, direction, load_sweep, objective_value, override

SWEEPS = sorted((REPO / "configs" / "sweeps").glob("*.yaml"))
QUICKSTART = REPO / "configs" / "quickstart.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"base: {QUICKSTART}\n" + text)
    return path


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_every_shipped_sweep_loads_and_names_its_command(path):
    cfg = load_sweep(path)
    first = path.read_text().splitlines()[0]
    assert first == f"# python -m rm sweep configs/sweeps/{path.name}"
    assert cfg.space and (REPO / cfg.base).is_file()


def test_there_is_a_shipped_sweep():
    assert [p.name for p in SWEEPS] >= ["quickstart-lr.yaml"]


def test_every_field_is_documented():
    tree = ast.parse((REPO / "rm" / "sweep" / "config.py").read_text())
    classes = [c for c in tree.body if isinstance(c, ast.ClassDef) and c.name in ("ParamSpec", "SweepConfig")]
    classes += [c for c in tree.body if isinstance(c, ast.ClassDef) and c.name.endswith("Config")]
    undocumented = [
        f"{cls.name}.{ast.unparse(node.target)}"
        for cls in classes
        for k, node in enumerate(cls.body)
        if isinstance(node, ast.AnnAssign) and not (k + 1 < len(cls.body) and isinstance(cls.body[k + 1], ast.Expr))
    ]
    assert len({c.name for c in classes}) == 5 and not undocumented


def test_a_bare_list_is_a_list_of_values_and_keeps_each_type(tmp_path):
    cfg = load_sweep(write(tmp_path, "sampler: grid\nspace:\n  train.lr: [1e-4, 3]\n  train.scheduler: [cosine]\n"))
    assert cfg.space["train.lr"] == ParamSpec(values=[1e-4, 3])
    assert [type(v) for v in cfg.space["train.lr"].values] == [float, int]  # 3 stays an int: optuna stores it as such
    mixed = build(ParamSpec, {"values": [True, 2, 0.5, "x"]}, "w")
    assert [type(v) for v in mixed.values] == [bool, int, float, str]
    with pytest.raises(ConfigError, match=r"w: values\[0\]: expected bool or int or float or str, got list"):
        build(ParamSpec, {"values": [[1]]}, "w")


def test_ranges_and_defaults(tmp_path):
    text = "sampler: tpe\nn_trials: 3\nobjective: {metric: loss}\nspace:\n"
    text += "  train.lr: {low: 1e-5, high: 1e-2, log: true}\n"
    text += "  train.max_steps: {low: 10, high: 50, type: int, step: 10}\n"
    cfg = load_sweep(write(tmp_path, text))
    assert cfg.space["train.lr"] == ParamSpec(low=1e-5, high=1e-2, log=True)
    assert cfg.space["train.max_steps"].type == "int" and cfg.space["train.max_steps"].step == 10.0
    assert direction(cfg) == "minimize" and cfg.parallelism == 1 and cfg.launch == "auto"


@pytest.mark.parametrize(
    "override_text, fragment",
    [
        ("samplr=grid", r"unknown key samplr"),
        ("objective.metrc=loss", r"unknown key objective\.metrc"),
        ("space={train.lr: {lo: 1}}", r"unknown key space\.train\.lr\.lo"),
        ("n_trials=many", r"n_trials: expected an integer"),
        ("space={train.batch_size: [8, eight]}", r"space\.train\.batch_size: the value 'eight' .*expected an integer"),
        ("space={train.lr: [true]}", r"space\.train\.lr: the value True .*train\.lr: expected a number"),
        ("space={train.lrr: [1]}", r"space\.train\.lrr: .*unknown key train\.lrr"),
        ("space={train.lr: {low: 1e-4, high: 1e-2}}", r"space\.train\.lr: a grid sweep needs a list of values"),
        ("objective.metric=acc", r"objective\.metric: 'acc' is not one of"),
        ("launch=in-process parallelism=2", r"launch: in-process runs one"),
        ("sampler=random", r"n_trials: must be > 0 for the random sampler"),
        ("heartbeat_interval=30 heartbeat_grace=10", r"heartbeat_interval, heartbeat_grace: need 1 <= "),
        ("overrides=[train.lrr=1]", r"base/overrides: .*unknown key train\.lrr"),
    ],
)
def test_problems_name_the_dotted_key(tmp_path, override_text, fragment):
    path = write(tmp_path, "sampler: grid\nspace:\n  train.lr: [1e-3]\n")
    with pytest.raises(ConfigError, match=fragment):
        load_sweep(path, override_text.split(" ") if "={" not in override_text else [override_text])


def test_range_problems_are_collected_at_once(tmp_path):
    text = "sampler: random\nn_trials: 2\nspace:\n  train.lr: {low: 0, high: 1, log: true}\n"
    text += "  train.max_steps: {low: 10, high: 100}\n  train.warmup_ratio: {low: 0.5, high: 0.1}\n"
    with pytest.raises(ConfigError) as e:
        load_sweep(write(tmp_path, text))
    message = str(e.value)
    assert "space.train.lr: a log range needs low > 0" in message
    assert "space.train.max_steps: the value 10.0" in message and "add type: int" in message
    assert "space.train.warmup_ratio: low (0.5) must be below high (0.1)" in message


@pytest.mark.parametrize("value", [True, False, 3, 1e-5, 0.1, "cosine", "1e-3", "true", "a b", ""])
def test_an_override_reads_back_as_the_same_value(value):
    keys, parsed = parse_override(override("train.x", value))
    assert keys == ["train", "x"] and parsed == value and type(parsed) is type(value)


def test_objective_value_reads_overall_or_one_subset():
    result = {"overall": {"accuracy": 0.75, "loss": 0.5}, "subsets": {"harmless": {"accuracy": 0.5, "loss": 0.9}}}
    cfg = SweepConfig()
    assert objective_value(result, cfg) == 0.75
    cfg.objective.metric, cfg.objective.subset = "loss", "harmless"
    assert objective_value(result, cfg) == 0.9
    cfg.objective.subset = "helpful"
    with pytest.raises(ConfigError, match=r"objective\.subset: no eval subset 'helpful'.*\['harmless'\]"):
        objective_value(result, cfg)


def test_overrides_on_the_command_line_add_to_the_files_list(tmp_path):
    """The README's `'overrides=[train.max_steps=150]'` keeps the file's export.enabled=false."""
    path = write(tmp_path, "overrides: [export.enabled=false]\nsampler: grid\nspace:\n  train.lr: [1e-3]\n")
    cfg = load_sweep(path, ["overrides=[train.max_steps=150]", "overrides=train.eval_steps=50", "seed=3"])
    assert cfg.overrides == ["export.enabled=false", "train.max_steps=150", "train.eval_steps=50"]
    assert cfg.seed == 3
    with pytest.raises(ConfigError, match=r"^override samplr=grid: unknown key samplr"):
        load_sweep(path, ["samplr=grid"])
