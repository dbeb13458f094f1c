"""One first-fit packer: `rm.collate.token_budget.Rows`. Training's plan, the packed collators and `rm serve`'s budget
each kept a first-fit loop of their own, kept in step by tests; a second copy that drifts (another order, `<`
for `<=`) makes a batch planned within budget lay out wider than planned. A first-fit loop takes free slots off
the row it found by scanning the rows: `free[r] -= n` inside a function that iterates `free`."""

import ast
from pathlib import Path

RM = Path(__file__).resolve().parents[2] / "rm"
HOME = "collate/token_budget.py"


def scanned(fn: ast.AST) -> set[str]:
    """Lists a function iterates: `for x in L`, `enumerate(L)`, `range(len(L))`, comprehensions too."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.For | ast.comprehension):
            it = node.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("enumerate", "range"):
                it = it.args[0] if it.args else it
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "len" and it.args:
                    it = it.args[0]
            out.add(ast.unparse(it))
    return out


def first_fit_loops(source: str) -> list[str]:
    """Functions that take slots off an element of a list they scan."""
    hits = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            lists = scanned(fn)
            for node in ast.walk(fn):
                target = getattr(node, "target", None)
                if (
                    isinstance(node, ast.AugAssign)
                    and isinstance(node.op, ast.Sub)
                    and isinstance(target, ast.Subscript)
                ):
                    if ast.unparse(target.value) in lists:
                        hits.append(f"{fn.name}:{node.lineno}")
    return hits


def test_the_check_finds_the_first_fit_loops_rm_had():
    """The three shapes the planner, the collator and the server wrote (for-else, `next(...)`, `range(len(...))`)."""
    for_else = """
def plan(lengths, width):
    room = []
    for n in lengths:
        for r, free in enumerate(room):
            if n <= free:
                room[r] -= n
                break
        else:
            room.append(width - n)
"""
    found_by_next = """
class Fill:
    def add(self, need):
        row = next((r for r, free in enumerate(self.room) if free >= need), None)
        if row is not None:
            self.room[row] -= need
"""
    by_index = """
def put(room, n):
    for r in range(len(room)):
        if room[r] >= n:
            room[r] -= n
            return r
"""
    assert first_fit_loops(for_else) == ["plan:7"]
    assert first_fit_loops(found_by_next) == ["add:6"]
    assert first_fit_loops(by_index) == ["put:5"]
    assert first_fit_loops("def f(xs, total):\n    for x in xs:\n        total -= x\n") == []


def test_rm_has_one_first_fit_packer():
    """`Rows.add` is the only one; a planner that needs rows uses `Rows` or `plan_rows` (rm/collate/token_budget.py)."""
    found = {str(p.relative_to(RM)): first_fit_loops(p.read_text()) for p in RM.rglob("*.py")}
    found = {path: [hit.split(":")[0] for hit in hits] for path, hits in found.items() if hits}
    assert found == {HOME: ["add"]}
