"""Command options from one source: the dataclasses of rm/cli give the flags, their help, the `key=value`
overrides (checked as a run config's are) and the tables of docs/commands.md."""

import re

import pytest

from conftest import REPO
from rm.cli import build_parser, parse
from rm.cli import main as cli
from rm.cli.evaluate import EvalFlags, settle_eval
from rm.cli.export import ExportFlags
from rm.cli.redteam import RedteamFlags
from rm.cli.score import ScoreFlags
from rm.cli.serve import ServeFlags
from rm.config.flags import field_docs, options_table, settle
from rm.serve.serve_config import ServeConfig

COMMANDS = {"eval": EvalFlags, "score": ScoreFlags, "serve": ServeFlags, "export": ExportFlags, "redteam": RedteamFlags}
INTRO = """\
`rm eval`, `rm score`, `rm serve`, `rm export` and `rm redteam` read their options from dataclasses, as `rm train`
reads its config: the docstring under each field is its `--help` text and its row below (`options_table` in
`rm/config/flags.py` writes these tables, and a test keeps them equal to it). Every option is also a `key=value`
argument by its key, before or after the flags (`rm score --model M --input F batch_size=32 dtype=bfloat16`),
read as YAML and checked as a run config's overrides are: an unknown key or a wrong type stops the command with one
line naming it. `rm eval` also takes `data.KEY=VALUE` for any `data.*` key, as `--set KEY=VALUE`. An option that
means what a training key means carries its name: `--eval-fraction` is `data.eval_fraction` (its older name,
`--holdout`, still works).
"""


def test_the_readme_tables_are_the_generated_ones():
    readme = (REPO / "docs" / "commands.md").read_text()
    section = readme[readme.index("## Command options\n") : readme.index("## Configuration\n")]
    assert INTRO in section
    for name, cls in COMMANDS.items():
        table = re.search(rf"### `rm {name}`\n\n(\|.*?)\n\n", section + "\n", re.S)
        assert table, name
        assert table.group(1) == options_table(cls), (
            f"docs/commands.md table of rm {name}: run python scripts/options_tables.py"
        )


def test_each_flag_is_a_field_and_its_help_is_the_docstring():
    parsers = {n: p for n, p in next(a for a in build_parser()._actions if a.dest == "command").choices.items()}
    for name, cls in COMMANDS.items():
        docs = field_docs(cls)
        helps = {a.dest: a.help for a in parsers[name]._actions}
        for key, doc in docs.items():
            assert helps[key] == doc.replace("%", "%%"), (name, key)
        assert set(helps) - set(docs) == {"help", "settings"}, name  # no flag outside the dataclass


def test_eval_fraction_is_training_s_name_and_holdout_still_works():
    base = ["eval", "--model", "m", "--data", "d.jsonl"]
    assert parse(build_parser(), [*base, "--eval-fraction", "0.2"]).eval_fraction == 0.2
    assert parse(build_parser(), [*base, "--holdout", "0.3"]).eval_fraction == 0.3
    flags = settle_eval(parse(build_parser(), [*base, "eval_fraction=0.25", "data.split_version=2"]))
    assert flags.eval_fraction == 0.25 and flags.overrides == ["split_version=2"]  # data.KEY joins --set
    flags = settle_eval(parse(build_parser(), [*base, "--subsets", "a", "b", "seed=4"]))
    assert flags.subsets == ["a", "b"] and flags.seed == 4  # not a subset named "seed=4"


def test_key_value_overrides_before_or_after_flags_win_over_flags():
    argv = ["score", "batch_size=3", "--model", "m", "--input", "x.jsonl", "--batch-size", "8", "dtype=bfloat16"]
    flags = settle(parse(build_parser(), argv), ScoreFlags)
    assert (flags.batch_size, flags.dtype, flags.model, flags.input) == (3, "bfloat16", "m", "x.jsonl")
    argv = ["serve", "m", "port=0", "allow_hosts=[a.example, b.example]", "auth=false", "--max-texts", "9"]
    cfg = settle(parse(build_parser(), argv), ServeFlags)
    assert (cfg.port, cfg.allow_hosts, cfg.auth, cfg.max_texts) == (0, ("a.example", "b.example"), False, 9)
    flags = settle(parse(build_parser(), ["serve", "m", "--allow-host", "x", "--no-prefix-cache"]), ServeFlags)
    assert flags.allow_hosts == ("x",) and flags.prefix_cache is False
    assert isinstance(flags, ServeConfig)
    flags = settle(parse(build_parser(), ["export", "run", "--out", "o", "normalize=true"]), ExportFlags)
    assert flags.normalize is True and flags.reward_only is None


@pytest.mark.parametrize(
    "argv, line",
    [
        (["score", "--model", "m", "--input", "x", "batch_sze=3"], "unknown key batch_sze, did you mean batch_size?"),
        (["score", "--model", "m", "--input", "x.jsonl", "batch_size=many"], "batch_size: expected an integer"),
        (["eval", "--model", "m", "--data", "d", "dtype=float8"], "dtype must be one of float32, bfloat16, float16"),
        (["serve", "m", "port=high"], "port: expected an integer, got 'high'"),
        (["export", "run", "--out", "o", "normalize=maybe"], "normalize: expected true or false, got 'maybe'"),
        (["redteam", "--scores", "s", "fields=x"], "key fields, did you mean field? (known under the top level:"),
    ],
)
def test_a_bad_override_is_one_line_naming_the_key(argv, line, capsys):
    assert cli(argv) == 2  # before any model or file is read
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: override {argv[-1]}") and line in err, err
