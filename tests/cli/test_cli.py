"""The command line: one-line errors instead of tracebacks, overrides anywhere, help with examples."""

import pytest

from conftest import REPO
from rm.cli import main as cli

SWEEP = REPO / "configs" / "sweeps" / "quickstart-lr.yaml"


def test_overrides_may_follow_flags(tmp_path, capsys):
    assert cli(["sweep", str(SWEEP), "--dry-run", "n_trials=1", f"sweep_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert out.count("python -m rm train") == 1 and str(tmp_path) in out
    assert cli(["sweep", str(SWEEP), "n_trials=1", "--dry-run", f"sweep_dir={tmp_path}"]) == 0
    assert capsys.readouterr().out == out
    with pytest.raises(SystemExit):
        cli(["sweep", str(SWEEP), "--dry-run", "--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_the_sweep_masks_a_password_in_the_storage_url(capsys):
    url = "postgresql://rm:s3cret-pw@db.example:5432/sweeps"
    assert cli(["sweep", str(SWEEP), "--dry-run", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "s3cret-pw" not in out and "postgresql://rm:***@db.example:5432/sweeps" in out


def test_subsets_take_commas_or_spaces_in_every_command(synthetic_root, capsys):
    from rm.cli.options import subset_list

    assert subset_list(["a,b", "c"]) == subset_list(["a", "b,", "c"]) == subset_list("a, b c") == ["a", "b", "c"]
    outputs = []
    for form in (["harmless,helpful-recall"], ["harmless", "helpful-recall"]):
        argv = ["data", "inspect", str(synthetic_root), "--json", "--vocab-size", "300", "--subsets", *form]
        assert cli(argv) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "helpful-recall" in outputs[0] and "helpful-arithmetic" not in outputs[0]


def test_help_ends_with_examples_that_parse(capsys):
    import shlex

    from rm.cli import build_parser, parse
    from rm.cli.examples import EXAMPLES

    for command, lines in EXAMPLES.items():
        with pytest.raises(SystemExit):
            cli([command, "--help"] if command else ["--help"])
        out = capsys.readouterr().out
        assert "examples:" in out and lines[0] in out, command
        for line in lines:
            argv = shlex.split(line.split("  #")[0])
            argv = argv[argv.index("rm") + 1 :]
            if "--help" not in argv:
                parse(build_parser(), argv)  # exits (SystemExit) on an example that does not parse


def test_data_inspect_takes_columns_as_eval_does(tmp_path, capsys):
    path = tmp_path / "pairs.csv"
    path.write_text("question,good,bad\n2+2?,4,5\n3+3?,6,7\n")
    argv = ["data", "inspect", str(path), "--json", "--vocab-size", "300"]
    assert cli([*argv, "--columns", "prompt=question,chosen=good,rejected=bad"]) == 0
    assert '"prompt": 2' in capsys.readouterr().out  # both rows read in the prompt format
    assert cli(argv) == 2  # without it: what to map, not "set data.on_bad_record=skip"
    err = capsys.readouterr().err
    assert "data.columns={prompt: COLUMN, chosen: COLUMN, rejected: COLUMN}" in err and "on_bad_record" not in err


def test_every_command_describes_itself_and_every_option():
    """`--help` of each command opens with what it does, explains each option, and the data options name
    every file type rm reads (not only JSON lines)."""
    import argparse

    from rm.cli import build_parser

    def subparsers(parser):
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices

    found = {}
    for name, p in subparsers(build_parser()).items():
        if name != "sweep-trial":  # hidden: a sweep's child
            found[name] = p
            found |= {f"{name} {n}": s for n, s in (subparsers(p).items() if name == "data" else [])}
    for name, p in found.items():
        assert p.description, name
        assert not [a.dest for a in p._actions if not a.help], name
    helps = {(n, a.dest): a.help for n, p in found.items() for a in p._actions}
    for key in [("eval", "data"), ("score", "input"), ("data inspect", "source")]:
        assert ".csv" in helps[key] and ".parquet" in helps[key] and ".json" in helps[key], key
