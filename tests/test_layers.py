"""The package's own import graph: no module imports itself back through others, type-only
imports included (docs/architecture.md: data moves left to right)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The toolkeeper modules a module imports, wherever the import stands (type-only too)."""
    found: set[str] = set()
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]).strip(".")
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != this and name.startswith("toolkeeper"):
                found.add(name)
    return found


def test_no_import_cycles() -> None:
    paths = {module_name(p): p for p in (SRC / "toolkeeper").rglob("*.py") if "migrations" not in p.parts}
    known = set(paths)
    graph = {name: imports_of(path, known) for name, path in paths.items()}
    # A package's __init__ re-exporting its own modules is not a cycle between layers.
    for name in graph:
        graph[name] = {dep for dep in graph[name] if not (name.startswith(dep + ".") and dep in paths)}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == [], "\n".join(" -> ".join(cycle) for cycle in cycles)
