"""The import graph of the `spanuq` package, read from its source (no module is executed).

Every ``import`` counts, also those inside functions (lazy imports still run when the
function does), and so does a string naming a module in a registry
(``"spanuq.train.stage.stage:run_train"``, ``import_module("spanuq.score.scorer")``): the stage
and baseline registries and the package's lazy names import through such strings.

Used by tests/test_architecture.py (layers, circles, dvc.yaml deps); run it as a script
for the numbers of docs/architecture.md:

    python tests/imports.py [--root .]
"""
from __future__ import annotations

import argparse
import ast
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = "spanuq"
_MODULE_STRING = re.compile(rf"^{PACKAGE}(\.\w+)+(:\w+)?$")


def modules(root: Path) -> dict[str, Path]:
    """{dotted module name: file} of every module of the package under ``root``."""
    out = {}
    for f in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _is_package(name: str, files: dict[str, Path]) -> bool:
    return files[name].name == "__init__.py"


def _resolve(name: str, files: dict[str, Path]) -> str | None:
    """The module a dotted name refers to: itself, or the module that defines the attribute."""
    while name and name not in files:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, files: dict[str, Path]) -> set[str]:
    """The package modules that module ``name`` imports (directly)."""
    tree = ast.parse(files[name].read_text(encoding="utf-8"))
    here = name if _is_package(name, files) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_STRING.match(node.value):
            targets = [node.value.split(":")[0]]
        for t in targets:
            if t == PACKAGE or t.startswith(PACKAGE + "."):
                m = _resolve(t, files)
                if m and m != name:
                    found.add(m)
    return found


def graph(root: Path) -> dict[str, set[str]]:
    """{module: modules it imports}.  Importing ``spanuq.a.b`` also runs the package ``spanuq.a``
    (its ``__init__``); the root package's lazy names (PEP 562) run only when asked for, so no
    module depends on ``spanuq`` itself."""
    files = modules(root)
    g = {}
    for name in files:
        deps = imports_of(name, files)
        for d in list(deps):
            parent = d.rpartition(".")[0]
            while parent != PACKAGE and parent and not name.startswith(parent + "."):
                deps.add(parent)
                parent = parent.rpartition(".")[0]
        deps.discard(PACKAGE)
        g[name] = deps
    return g


def unit(name: str) -> str:
    """The part of the package a module belongs to: a subpackage or a top-level module."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else name


def strongly_connected(g: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def unit_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    ug: dict[str, set[str]] = defaultdict(set)
    for m, deps in g.items():
        ug[unit(m)]
        for d in deps:
            if unit(d) != unit(m) and d != PACKAGE:
                ug[unit(m)].add(unit(d))
    return dict(ug)


def back_up_imports(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Module imports ``a -> b`` whose units import each other (directly or through others):
    one of the two directions runs back up, whatever the layers are."""
    ug = unit_graph(g)
    comp_of = {u: i for i, comp in enumerate(strongly_connected(ug)) for u in comp}
    return sorted((m, d) for m, deps in g.items() for d in deps
                  if unit(m) != unit(d) and unit(m) in comp_of and comp_of.get(unit(d)) == comp_of[unit(m)])


def closure(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for d in g.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def private_imports(root: Path) -> list[tuple[str, str]]:
    """``(module, "other.module:_name")`` for each private name imported from another module."""
    files = modules(root)
    out = []
    for name, f in files.items():
        here = name if _is_package(name, files) else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE)):
                base = here
                for _ in range(max(node.level - 1, 0)):
                    base = base.rpartition(".")[0]
                mod = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                out += [(name, f"{mod}:{a.name}") for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="import graph numbers of the spanuq package")
    ap.add_argument("--root", default=".", type=Path)
    args = ap.parse_args()
    files = modules(args.root)
    g = graph(args.root)
    top = sorted(n for n in files if n.count(".") == 1 and not _is_package(n, files))
    circles = strongly_connected(g)
    back = back_up_imports(g)
    lines = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files.values())
    print(f"modules at {PACKAGE}/ top level: {len(top)} ({', '.join(m.split('.')[-1] for m in top)})")
    print(f"units (top-level modules + subpackages): {len(unit_graph(g))}")
    print(f"module import circles: {len(circles)}")
    for c in circles:
        print("   ", " <-> ".join(c))
    ucirc = strongly_connected(unit_graph(g))
    print(f"unit import circles: {len(ucirc)}")
    for c in ucirc:
        print("   ", " <-> ".join(c))
    print(f"imports between units that import each other (run back up): {len(back)}")
    for a, b in back:
        print(f"    {a} -> {b}")
    priv = private_imports(args.root)
    print(f"private names imported from another module: {len(priv)}")
    for a, b in priv:
        print(f"    {a} imports {b}")
    print(f"python files: {len(files)}, lines: {lines}")


if __name__ == "__main__":
    main()
