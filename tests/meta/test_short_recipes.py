"""rm's scoring entry points read as short recipes over the scoring room: `rm eval`'s `evaluate_model` (load and
prepare, encode, score, build eval.json, write) and the eval gather `gather_rewards` (each batch's rows, this
process's columns, one gather) fit on a screen, each step a named function whose docstring says why. A recipe
that grows past a screen is where a second copy of a step (a reader, a column layout) hides."""

import ast
from pathlib import Path

RM = Path(__file__).resolve().parents[2] / "rm"
RECIPES = {"evaluation/eval_report.py": "evaluate_model", "evaluation/gather.py": "gather_rewards"}
MAX_LINES = 40
"""A screen: the signature, a docstring that says what comes back and why, and a dozen or two steps."""


def functions(module: str) -> dict[str, ast.FunctionDef]:
    """The module's top-level functions by name."""
    tree = ast.parse((RM / module).read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def length(node: ast.FunctionDef) -> int:
    """Lines from the first decorator to the last line of the body, docstring included."""
    return node.end_lineno - min([node.lineno] + [d.lineno for d in node.decorator_list]) + 1


def test_scoring_entry_points_are_short_recipes():
    lengths = {f"{m}:{name}": length(functions(m)[name]) for m, name in RECIPES.items()}
    assert {k: n for k, n in lengths.items() if n > MAX_LINES} == {}


def test_every_step_of_the_recipes_says_why():
    """Each top-level function of the two modules has a docstring: a step named without one is only a jump."""
    missing = [f"{m}:{name}" for m in RECIPES for name, f in functions(m).items() if ast.get_docstring(f) is None]
    assert missing == []
