"""The import contract of rm: role folders in layers, imports only downwards, no import cycles.

    client < errors < config < data < tokens < collate < model < evaluation < suites < export < scoring < training
        < sweep < serve < cli < api

`client` (the HTTP client of `rm serve`, imported in a policy's venv without torch) sits below everything and
imports nothing of rm above it; `scoring` (the one loader of a trained model for inference) sits above `export`,
whose code rebuilds a run without an export from its checkpoint, and below every command that scores; `serve` (the
reward server) sits beside `cli`, which starts it. `api` (`rm.train`,
`rm.load`) is the top: `rm/__init__.py` belongs to it, since its `__getattr__` imports `rm.api` when `rm.train` or
`rm.load` is first read. Importing the package for the one name it defines itself, `rm.__version__` (`from rm
import __version__`, or `import rm` where only `rm.__version__` is read), runs no such import and counts as none.

A module may import rm modules of its own layer or of layers below it, never above; every import
counts, the lazy ones inside functions too. `python scripts/check_layers.py [PACKAGE_DIR]` prints each
breach and exits 1, or prints a one-line summary and exits 0. Run by `make lint` and by
tests/meta/test_layers.py, which also shows it failing on a deliberate back-import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

LAYERS = (
    "client",
    "errors",
    "config",
    "data",
    "tokens",
    "collate",
    "model",
    "evaluation",
    "suites",
    "export",
    "scoring",
    "training",
    "sweep",
    "serve",
    "cli",
    "api",
)
TOP = {"__main__": "cli", "__init__": "api"}  # rm/__main__.py runs the CLI; rm/__init__.py imports rm.api lazily
EAGER = {"__version__", "__all__"}
"""What rm/__init__.py defines itself, importing nothing: reading it is no import of the layer above."""


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file for every module of the package at `root` (`rm/data/load.py` -> `rm.data.load`)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(path: Path, name: str, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported module) for every import of a package module in the file, resolved to a known module."""
    package = name.split(".")[0]
    is_package = path.name == "__init__.py"
    found = []
    tree = ast.parse(path.read_text(), str(path))
    # `import rm` to read `rm.__version__` alone runs nothing of rm/__init__.py's lazy imports
    read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _names(n.value, package)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            eager = read <= EAGER
            targets = [a.name for a in node.names if not (a.name == package and a.asname is None and eager)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from rm.cli import data` imports the module rm.cli.data; `from rm.config import X`, rm.config
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            if base == package:  # `from rm import __version__`: nothing imported
                targets = [t for t, a in zip(targets, node.names, strict=True) if a.name not in EAGER]
        else:
            continue
        for target in targets:
            if target.split(".")[0] != package:
                continue
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            found.append((node.lineno, target))
    return found


def _names(node: ast.expr, package: str) -> bool:
    return isinstance(node, ast.Name) and node.id == package


def layer(name: str) -> int:
    parts = name.split(".")
    role = parts[1] if len(parts) > 1 else "__init__"
    return LAYERS.index(TOP.get(role, role))


def problems(root: Path) -> list[str]:
    """Every import that goes up a layer, then every import cycle; empty when the contract holds."""
    known = modules(root)
    unknown = sorted({n.split(".")[1] for n in known if "." in n} - set(LAYERS) - set(TOP))
    out = [f"{root / u}: not a layer of the contract ({', '.join(LAYERS)})" for u in unknown]
    if out:
        return out
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        graph[name] = set()
        for line, target in imports(path, name, known):
            if target == name:
                continue
            graph[name].add(target)
            if layer(target) > layer(name):
                out.append(f"{path}:{line}: {name} ({LAYERS[layer(name)]}) imports {target} ({LAYERS[layer(target)]})")
    out += [f"import cycle among: {', '.join(c)}" for c in cycles(graph)]
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each group of two or more modules that import each other, directly or around a loop (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "rm"
    found = problems(root)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} breaches of the layer contract ({' < '.join(LAYERS)})")
        return 1
    print(f"layer contract holds: {len(modules(root))} modules, imports only downwards, no cycles")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
