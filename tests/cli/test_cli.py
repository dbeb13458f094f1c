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
