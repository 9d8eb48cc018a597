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
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == [], "\n".join(" -> ".join(cycle) for cycle in cycles)


# Each layer, left to right as in docs/architecture.md: a folder may import the folders to its
# left, never those to its right.
LAYERS = (
    "config",
    "downstreams",
    "catalog",
    "annotations",
    "toolsets",
    "policy",
    "store",
    "services",
    "relay",
    "pipeline",
    "runtime",
    "faces",
    "edge",
    "cli",
)
# Modules every layer may use: the protocol's vocabulary, the error kinds, logging, the SDK seam,
# showing text from outside to a person.
FOUNDATION = {
    "toolkeeper",
    "toolkeeper.display",
    "toolkeeper.errors",
    "toolkeeper.jsonwire",
    "toolkeeper.log",
    "toolkeeper.protocol",
}
FOUNDATION |= {"toolkeeper.sdk_private"}
# Outside the flow: the entry point wires everything; the demo servers stand alone.
ENTRY = {"toolkeeper.__main__"}
STANDALONE = "demo"


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_layers_import_only_to_their_left() -> None:
    paths = {module_name(p): p for p in (SRC / "toolkeeper").rglob("*.py") if "migrations" not in p.parts}
    known = set(paths)
    rank = {layer: index for index, layer in enumerate(LAYERS)}
    wrong: list[str] = []
    for name, path in sorted(paths.items()):
        if name in ENTRY or name in FOUNDATION:
            continue
        layer = layer_of(name)
        for dep in sorted(imports_of(path, known)):
            dep_layer = layer_of(dep)
            if dep in FOUNDATION or dep_layer == layer:
                continue
            if layer == STANDALONE or dep_layer == STANDALONE:
                wrong.append(f"{name} -> {dep} (the demo servers stand alone)")
            elif layer not in rank or dep_layer not in rank:
                wrong.append(f"{name} -> {dep} (a folder missing from LAYERS)")
            elif rank[dep_layer] > rank[layer]:
                wrong.append(f"{name} -> {dep} ({layer} is left of {dep_layer})")
    assert wrong == [], "\n".join(wrong)


def test_the_layer_table_matches_the_architecture_page() -> None:
    page = (SRC.parent / "docs" / "architecture.md").read_text()
    flow = next(line for line in page.splitlines() if line.startswith("layers:"))
    assert tuple(flow.removeprefix("layers:").split()) == LAYERS
