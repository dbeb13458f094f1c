"""Rewrite docs/commands.md's "Command options" section from the commands' option dataclasses, after a field or its
docstring changed (tests/cli/test_options.py holds the page equal to what this writes).

    python scripts/options_tables.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "cli"), str(REPO / "tests")]

from test_options import COMMANDS, INTRO  # noqa: E402  (the test's own list of commands and intro)

from rm.config.flags import options_table  # noqa: E402


def main() -> None:
    section = "\n".join(["## Command options\n", INTRO, *(f"### `rm {n}`\n\n{options_table(c)}\n" for n, c in
                         COMMANDS.items())]) + "\n"  # fmt: skip
    readme = REPO / "docs" / "commands.md"
    text = readme.read_text()
    start, end = text.index("## Command options\n"), text.index("## Configuration\n")
    readme.write_text(text[:start] + section + text[end:])


if __name__ == "__main__":
    main()
