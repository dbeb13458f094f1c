"""Command line: `python -m rm COMMAND ...` (also `accelerate launch -m rm COMMAND ...`).

One module per command, each with `add(subparsers)` and `run(args) -> exit code`: parse, make one call,
print. Commands import their library lazily, so `python -m rm --help` answers without loading torch.
This is the only place where errors become exit codes: an `RMError` (a user's mistake or a run that
could not go on) ends in one `error: ...` line, and so does a Ctrl-C (exit code 130); anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rm.cli import data, evaluate, export, merge, redteam, score, serve, sweep, train
from rm.cli.examples import EXAMPLES, epilog
from rm.data.hub_reach import fail_fast
from rm.errors import ConfigError, RMError, TrainingError

COMMANDS = (train, sweep, data, export, merge, evaluate, score, redteam, serve)


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter  # keeps the examples' lines as written
    parser = argparse.ArgumentParser(
        prog="python -m rm", description=__doc__.splitlines()[0], epilog=epilog(""), formatter_class=raw
    )
    # The metavar lists the commands a person uses; the hidden `sweep-trial` (a sweep's child) stays out.
    commands = "{train,sweep,data,export,merge,eval,score,redteam,serve}"
    sub = parser.add_subparsers(dest="command", required=True, metavar=commands)
    for command in COMMANDS:
        command.add(sub)
    for name, p in sub.choices.items():
        if name in EXAMPLES:
            p.epilog, p.formatter_class = epilog(name), raw
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """parse_args, except that `key=value` overrides may also come after flags (`sweep X.yaml --dry-run
    n_trials=2`): argparse takes the positionals in one go, so it would call the later ones unrecognized.
    (parse_intermixed_args would do the same but refuses subcommands.)"""
    args, extra = parser.parse_known_args(argv)
    # train's and sweep's overrides are `overrides`; the other commands' (rm/config/flags.py) `settings`
    target = "overrides" if args.command in ("train", "sweep", "sweep-trial") else "settings"
    if extra and hasattr(args, target) and all("=" in e and e[0] != "-" for e in extra):
        setattr(args, target, getattr(args, target) + extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def import_plugins() -> None:
    """The modules named in `RM_PLUGINS` (comma-separated), imported before the command runs: how a label, loss
    term or metric of your own (README, Adding a label) reaches `python -m rm` and every process `accelerate
    launch` starts, which inherit the variable. Nothing is imported unless you name it."""
    for name in filter(None, (n.strip() for n in os.environ.get("RM_PLUGINS", "").split(","))):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name.split(".")[0] and e.name != name:
                raise  # the plugin's own import failed: its traceback says where
            raise ConfigError(f"RM_PLUGINS: no module {name!r} to import (is its folder on PYTHONPATH?)") from None


def main(argv: list[str] | None = None) -> int:
    # The Rust tokenizer's own thread pool does not survive a fork (data.num_proc, loader workers): off, and
    # rm spreads its batch calls over Python threads itself (rm/tokens/ids.py), so this costs no speed.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parse(build_parser(), argv)
    fail_fast()  # an unreachable Hub: one line at once, not a minute of retries (rm/data/hub_reach.py)
    try:
        import_plugins()
        return args.func(args)
    except TrainingError as e:  # a run that stopped (non-finite losses, out of memory) with what to change
        print(f"error: {e}", file=sys.stderr)
        return 1
    except RMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk where no writer of rm's named the file: still one line
        from rm.config.atomic import is_no_space, no_space

        if not is_no_space(e):
            raise
        print(f"error: {no_space(e.filename or os.getcwd(), e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a Ctrl-C outside the training loop, or the second one inside it
        print("\nerror: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
