"""The README's commands run as written (with a tiny model standing in for a trained run's export)."""

import json
import re
import shlex

import pytest

from conftest import HH_HARMLESS_TEST, REPO
from rm.cli import main as cli

README = (REPO / "README.md").read_text()


def commands(prefix: str) -> list[list[str]]:
    """Every `python -m rm ...` command of the README's bash blocks that starts with `prefix`, as argv."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith(f"python -m rm {prefix}"):
                out.append(shlex.split(line)[3:])
    return out


def swap(argv: list[str], flag: str, value: str) -> list[str]:
    i = argv.index(flag)
    return argv[:i] + [flag, value] + argv[i + 2 :]


@pytest.mark.skipif(not HH_HARMLESS_TEST.is_file(), reason="needs the shared HH file")
@pytest.mark.slow
def test_the_first_eval_example_runs_as_written_on_the_shipped_hh_file(exported_tiny, tmp_path, monkeypatch):
    argv = commands("eval")[0]
    assert "../shared/data/hh-rlhf/harmless-base/test.jsonl.gz" in argv
    monkeypatch.chdir(REPO)  # the README's paths are relative to the repository
    argv = swap(swap(argv, "--model", str(exported_tiny)), "--out", str(tmp_path / "eval"))
    assert cli([*argv, "--bootstrap-samples", "50"]) == 0
    saved = json.loads((tmp_path / "eval" / "eval.json").read_text())["eval"]
    assert sum(saved["records_skipped"].values()) == 4  # the file's 4 empty answers, reported


@pytest.mark.slow
def test_the_transformers_snippet_runs_and_prefers_the_refusal(tmp_path, capsys):
    """The snippet's two answers are a pair the demo's data teaches (refusal over compliance); on a short
    quickstart run's export it runs as written and ranks them as the README says."""
    from conftest import QUICKSTART, TINY
    from rm.data import synthetic

    snippet = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    assert "Sorry, but I can't help with that." in synthetic._REFUSALS
    assert "Sure! Do it when nobody is watching." in synthetic._COMPLIANCE
    assert cli(["train", str(QUICKSTART), *TINY, "train.report_to=[]", f"output_dir={tmp_path}"]) == 0
    capsys.readouterr()
    exec(compile(snippet.replace("runs/quickstart", str(tmp_path)), "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "can't help" in lines[0]
    refusal, compliance = (float(line.split(" ", 1)[0]) for line in lines)
    assert refusal > compliance


def test_every_readme_command_parses():
    """Each `python -m rm ...` line of the README's bash blocks is a command the CLI accepts (the ones that
    need a trained run or the network are run elsewhere or not at all; this catches renamed options)."""
    from rm.cli import build_parser, parse

    found = commands("")
    assert len(found) > 15
    for argv in found:
        parse(build_parser(), argv)  # SystemExit on an unknown option or a missing argument


def test_each_commands_help_names_every_option_the_readme_uses(capsys):
    """Every `--option` the README writes after `python -m rm COMMAND` (in a block or inline) is in that
    command's --help, so the two cannot drift apart (README: `export --evaluate`, help: `--eval`)."""
    used: dict[str, set[str]] = {}
    text = README.replace("\\\n", " ")
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
    import shlex

    from rm.cli.examples import EXAMPLES
    from rm.config import load_config

    for line in (line for lines in EXAMPLES.values() for line in lines if "-m rm train configs/" in line):
        argv = shlex.split(line.split("  #")[0])
        argv = argv[argv.index("train") + 1 :]
        cfg = load_config(REPO / argv[0], argv[1:])
        assert cfg.output_dir != "runs/quickstart" or cfg.train.overwrite, line
