"""The commands of README.md and docs/*.md run as written (a tiny model or a short quickstart run standing in for
a trained run). Every `python -m rm` line of their shell blocks is run by a test named in RUN_BY, or says why not
in a trailing `# not run by the tests: REASON` (the Hub, a GPU, a server, minutes of training)."""

import json
import re
import shlex
from pathlib import Path

import pytest

from conftest import HH_HARMLESS_TEST, QUICKSTART, REPO, TINY
from rm.cli import main as cli

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TEXTS = {p.relative_to(REPO).as_posix(): p.read_text() for p in PAGES}
README = TEXTS["README.md"]
NOT_RUN = "not run by the tests:"
COMMAND = re.compile(r"(?:^|[\s)])python -m rm (.*)$")  # after environment variables, if any


def shell_lines() -> list[tuple[str, str, str]]:
    """(page, command, trailing comment) of each `python -m rm` line in a bash or sh block, README first;
    a line continued with a backslash is one command."""
    out = []
    for page, text in TEXTS.items():
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                code, _, comment = line.partition(" #")
                m = COMMAND.search(code.strip())
                if m and not code.lstrip().startswith("#"):
                    out.append((page, m.group(1).strip(), comment))
    return out


def commands(prefix: str = "", *, runnable: bool = False) -> list[list[str]]:
    """The argv of every command that starts with `prefix` (only the unmarked ones with `runnable`)."""
    found = [c for _, c, note in shell_lines() if c.startswith(prefix) and not (runnable and NOT_RUN in note)]
    return [shlex.split(c) for c in dict.fromkeys(found)]  # a command on two pages runs once


RUN_BY = {
    "eval --model runs/hh-harmless-tiny/export": "test_the_first_eval_example_runs_as_written_on_the_shipped_hh_file",
    "train configs/": "test_the_training_commands_run_as_written",
    "export runs/quickstart ": "test_the_commands_on_the_demo_run_run_as_written",
    "eval --model runs/quickstart/export ": "test_the_commands_on_the_demo_run_run_as_written",
    "score --model runs/quickstart/export ": "test_the_commands_on_the_demo_run_run_as_written",
    "data inspect ": "test_the_quick_commands_run_as_written",
    "sweep configs/sweeps/quickstart-lr.yaml --dry-run": "test_the_quick_commands_run_as_written",
}
"""The prefix of each runnable command -> the test below that runs every unmarked command starting with it."""


def runs_of(test: str) -> list[list[str]]:
    return [argv for prefix, name in RUN_BY.items() if name == test for argv in commands(prefix, runnable=True)]


def test_every_unmarked_command_is_run_by_a_test():
    """A command added to the docs is run here, or marked with why it cannot run offline in seconds."""
    unmarked = [(page, c) for page, c, note in shell_lines() if NOT_RUN not in note]
    assert len(unmarked) >= 8
    assert [(page, c) for page, c in unmarked if not any(c.startswith(p) for p in RUN_BY)] == []
    assert {name for name in RUN_BY.values() if not callable(globals().get(name))} == set()
    assert all(commands(prefix, runnable=True) for prefix in RUN_BY), "a prefix that no command has"


def test_a_marked_command_says_why():
    notes = [note for _, _, note in shell_lines() if NOT_RUN in note]
    assert notes and all(re.search(NOT_RUN + r" \w", note) for note in notes), notes


def swap(argv: list[str], flag: str, value: str) -> list[str]:
    i = argv.index(flag)
    return argv[:i] + [flag, value] + argv[i + 2 :]


def local(argv: list[str], run, tmp_path) -> list[str]:
    """`argv` on the tiny run `run` in place of runs/quickstart, its outputs under `tmp_path`."""
    out = [a.replace("runs/quickstart", str(run)) for a in argv]
    tmp_path.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(out[:-1]):
        if a == "--out":
            out[i + 1] = str(tmp_path / f"out{i}")
    return out


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """A short quickstart run: what runs/quickstart holds after `make demo`, in seconds."""
    run = tmp_path_factory.mktemp("demo") / "run"
    assert cli(["train", str(QUICKSTART), *TINY, "train.report_to=[]", f"output_dir={run}"]) == 0
    return run


@pytest.mark.skipif(not HH_HARMLESS_TEST.is_file(), reason="needs the shared HH file")
@pytest.mark.slow
def test_the_first_eval_example_runs_as_written_on_the_shipped_hh_file(exported_tiny, tmp_path, monkeypatch):
    (argv,) = runs_of("test_the_first_eval_example_runs_as_written_on_the_shipped_hh_file")
    assert "../shared/data/hh-rlhf/harmless-base/test.jsonl.gz" in argv
    monkeypatch.chdir(REPO)  # the docs' paths are relative to the repository
    argv = swap(swap(argv, "--model", str(exported_tiny)), "--out", str(tmp_path / "eval"))
    assert cli([*argv, "--bootstrap-samples", "50"]) == 0
    saved = json.loads((tmp_path / "eval" / "eval.json").read_text())["eval"]
    assert sum(saved["records_skipped"].values()) == 4  # the file's 4 empty answers, reported


@pytest.mark.slow
def test_the_training_commands_run_as_written(tmp_path, monkeypatch):
    """Each `train configs/...` command, with the tiny model and a few steps added after it (later keys win)."""
    monkeypatch.chdir(REPO)
    found = runs_of("test_the_training_commands_run_as_written")
    assert found
    for i, argv in enumerate(found):
        out = tmp_path / f"run{i}"
        assert cli([*argv, *TINY, "train.report_to=[]", "export.enabled=false", f"output_dir={out}"]) == 0, argv
        assert (out / "eval.json").is_file()


@pytest.mark.slow
def test_the_commands_on_the_demo_run_run_as_written(demo_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    found = runs_of("test_the_commands_on_the_demo_run_run_as_written")
    assert {a[0] for a in found} >= {"export", "eval", "score"}
    for n, argv in enumerate(found):
        argv = local(argv, demo_run, tmp_path / f"command{n}")
        extra = ["--bootstrap-samples", "20"] if argv[0] == "eval" else []
        assert cli([*argv, *extra]) == 0, argv
        assert Path(argv[argv.index("--out") + 1]).exists(), argv  # every one writes its --out
    capsys.readouterr()


@pytest.mark.parametrize("argv", runs_of("test_the_quick_commands_run_as_written"), ids=" ".join)
def test_the_quick_commands_run_as_written(argv, monkeypatch, capsys):
    if any("../shared/" in a for a in argv) and not HH_HARMLESS_TEST.is_file():
        pytest.skip("needs the shared HH file")
    monkeypatch.chdir(REPO)
    assert cli(argv) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.slow
def test_the_transformers_snippet_runs_and_prefers_the_refusal(demo_run, capsys):
    """The snippet's two answers are a pair the demo's data teaches (refusal over compliance); on a short
    quickstart run's export it runs as written and ranks them as the README says."""
    from rm.data import synthetic

    snippet = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    assert "Sorry, but I can't help with that." in synthetic._REFUSALS
    assert "Sure! Do it when nobody is watching." in synthetic._COMPLIANCE
    capsys.readouterr()
    exec(compile(snippet.replace("runs/quickstart", str(demo_run)), "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "can't help" in lines[0]
    refusal, compliance = (float(line.split(" ", 1)[0]) for line in lines)
    assert refusal > compliance


def test_every_documented_command_parses():
    """Each `python -m rm ...` line of the shell blocks, run or not, is a command the CLI accepts: this catches
    renamed options in the commands that need a trained run, the Hub or a GPU too."""
    from rm.cli import build_parser, parse

    found = commands()
    assert len(found) > 15
    for argv in found:
        parse(build_parser(), argv)  # SystemExit on an unknown option or a missing argument


def test_each_commands_help_names_every_option_the_docs_use(capsys):
    """Every `--option` the README or a docs page writes after `python -m rm COMMAND` (in a block or inline) is in
    that command's --help, so the two cannot drift apart (docs: `export --evaluate`, help: `--eval`)."""
    used: dict[str, set[str]] = {}
    for text in TEXTS.values():
        text = text.replace("\\\n", " ")
        for m in re.finditer(r"python -m rm (train|sweep|data inspect|export|eval|score|redteam)\b([^`\n]*)", text):
            used.setdefault(m.group(1), set()).update(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", m.group(2)))
    assert {"eval", "score", "data inspect", "export", "sweep"} <= set(used)
    for command, options in used.items():
        with pytest.raises(SystemExit):
            cli([*command.split(), "--help"])
        shown = capsys.readouterr().out
        assert not [o for o in options if not re.search(rf"(?<![\w-]){o}\b", shown)], command


def test_help_examples_that_retrain_the_demo_replace_its_run():
    """After `make demo`, runs/quickstart exists: an example training into it needs train.overwrite=true."""
    from rm.cli.examples import EXAMPLES
    from rm.config import load_config

    for line in (line for lines in EXAMPLES.values() for line in lines if "-m rm train configs/" in line):
        argv = shlex.split(line.split("  #")[0])
        argv = argv[argv.index("train") + 1 :]
        cfg = load_config(REPO / argv[0], argv[1:])
        assert cfg.output_dir != "runs/quickstart" or cfg.train.overwrite, line
