"""An OpenAPI spec's schemas with every `$ref` inlined, so a tool's schemas stand alone.

References are resolved with `referencing` through the spec's registry (`LoadedSpec.lookup`).
A `$ref` is followed wherever JSON Schema puts a schema (`items`, `additionalProperties`,
`not`, each member of `allOf`/`anyOf`/`oneOf`, each value of `properties`,
`patternProperties`, `$defs`, …) and also where it puts a *map or list* of schemas: a whole
`properties` (or `patternProperties`, `$defs`, `dependentSchemas`) map that is itself
`{"$ref": "models/x.yaml#/Props"}`, as multi-file specs write, and an `allOf`/`anyOf`/`oneOf`
list given by `$ref`. Such a map is read from its own document (its members' relative `$ref`s
resolve there), with any keys written beside its `$ref` over it; a map that contains itself
through such references is left out where it recurs. A `$ref` with siblings (OpenAPI 3.1;
also accepted in 3.0) is the target with the siblings over it.

Cycles and size. References that form a cycle (a schema that contains itself, or schemas that
contain each other) are cut at depth one: such a schema is expanded where it is first reached
from outside its cycle, and inside it every reference back into the cycle is cut. Other
references are expanded at most `MAX_REF_DEPTH` (10) references deep, and one operation's
schemas hold at most `SCHEMA_BUDGET` schema objects (counted as if copied out): a reference
that would go past it is expanded less deep, and cut when even one level does not fit. A
reference cut for any of these reasons is replaced by an empty schema (any value) whose
description says why. So a circular or enormous spec costs bounded time, never a
`RecursionError`, and no tool's schema grows past what a client and a model can use.

Sharing. What a reference expands to depends only on the reference and how deep it may still
go, so each (reference, depth) is built once per spec and the same objects are used by every
operation that reaches it: memory follows the spec, not its expansion. The schemas returned
are therefore shared between tools and must be treated as read-only (copy before changing).

OpenAPI 3.0's `nullable: true` becomes `null` among the `type`s (or an `anyOf` with
`{"type": "null"}` when there is no `type`), and its boolean `exclusiveMinimum`/
`exclusiveMaximum` become JSON Schema's numbers. A `required` that is not a list
(`required: true` on a property, as Swagger wrote it) is dropped, as it would make the whole
schema invalid. Example and default values are kept as written, never read as schemas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from toolkeeper.downstreams.openapi.spec import LoadedSpec, SpecError

MAX_REF_DEPTH = 10
SCHEMA_BUDGET = 5_000

# Keywords whose value is a schema, a list of schemas, or a map of names to schemas; every other
# keyword's value (examples, defaults, enums, extensions) is data, kept as written.
SCHEMA_ONE = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
SCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
SCHEMA_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


@dataclass(frozen=True)
class _Walk:
    """Where an expansion stands: how many references deep it may still go, the cycle whose
    references it cuts, whether it is an operation's own schema (its references fitted to the
    budget), and the maps or lists by `$ref` it is inside (one met again is a cycle)."""

    depth: int
    home: int | None = None
    top: bool = False
    containers: frozenset[str] = frozenset()


def is_reference(node: Any) -> bool:
    return isinstance(node, Mapping) and isinstance(node.get("$ref"), str)


class Expander:
    """Inlines the `$ref`s of one spec's schemas, by the rules in the module's docstring.

    Cycles: references are grouped into strongly connected components (Tarjan's algorithm over
    the graph of which schema refers to which, through maps and lists given by `$ref`). A schema
    whose group is a cycle is expanded where it is reached from outside its group; inside that
    expansion every reference into the same group is cut. So a cycle unfolds once, whatever
    path led to it.
    """

    def __init__(self, spec: LoadedSpec, *, budget: int = SCHEMA_BUDGET) -> None:
        self.spec = spec
        self.is_30 = spec.is_30
        self.budget = budget
        self._expanded: dict[tuple[str, int], tuple[Any, int]] = {}
        self._edges: dict[str, tuple[str, ...]] = {}
        self._group: dict[str, int] = {}
        self._cyclic: set[int] = set()
        self._groups_made = 0
        self._left = budget

    def start_operation(self) -> None:
        self._left = self.budget

    def schema(self, node: Any, base: str) -> Any:
        """`node` (one of the operation's own schemas) with its references inlined."""
        return self._schema(node, base, _Walk(MAX_REF_DEPTH, top=True))[0]

    def _schema(self, node: Any, base: str, walk: _Walk) -> tuple[Any, int]:
        if not isinstance(node, Mapping):
            return node, 1
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._follow(node, ref, base, walk)
        size = 1
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in SCHEMA_MAP:
                members = self._container(value, base, walk)
                if members is None:
                    continue
                found, members_base, inner = members
                if isinstance(found, Mapping):
                    expanded: dict[str, Any] = {}
                    for name, sub in found.items():
                        expanded[name], count = self._schema(sub, members_base, inner)
                        size += count
                    out[key] = expanded
                else:
                    out[key] = found
            elif key in SCHEMA_LIST or (key == "items" and isinstance(value, list)):
                members = self._container(value, base, walk)
                if members is None:
                    continue
                found, members_base, inner = members
                if isinstance(found, list):
                    items: list[Any] = []
                    for sub in found:
                        item, count = self._schema(sub, members_base, inner)
                        items.append(item)
                        size += count
                    out[key] = items
                else:
                    out[key] = found
            elif key in SCHEMA_ONE:
                out[key], count = self._schema(value, base, walk)
                size += count
            elif key == "required" and not isinstance(value, list):
                continue  # `required: true` on a property (Swagger's habit) would make the schema invalid
            else:
                out[key] = value
        return (from_30(out) if self.is_30 else out), size

    def _container(self, value: Any, base: str, walk: _Walk) -> tuple[Any, str, _Walk] | None:
        """A keyword's map or list of schemas, through its `$ref` when it is one: what it holds,
        the document its members stand in, and the walk inside it; None where such a reference
        recurs inside itself."""
        if not is_reference(value):
            return value, base, walk
        absolute, document = self.spec.join(base, value["$ref"])
        if absolute in walk.containers:
            return None
        found = self.spec.lookup(absolute)
        if isinstance(found, Mapping) and len(value) > 1:
            found = {**found, **{k: v for k, v in value.items() if k != "$ref"}}
        return found, document, replace(walk, containers=walk.containers | {absolute})

    def _follow(self, node: Mapping[str, Any], ref: str, base: str, walk: _Walk) -> tuple[Any, int]:
        absolute = self.spec.join(base, ref)[0]
        result: Any
        if walk.home is not None and self._group_of(absolute) == walk.home:
            result, size = cut(ref, "it refers back to a schema that contains it (a cycle)"), 1
        elif walk.depth <= 0:
            result, size = cut(ref, f"it is more than {MAX_REF_DEPTH} references deep"), 1
        elif walk.top:
            result, size = self._fitted(absolute, ref, walk.depth)
        else:
            result, size = self._expand_ref(absolute, walk.depth)
        if len(node) == 1:
            return result, size
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        extra, count = self._schema(siblings, base, walk)
        merged = {**result, **extra} if isinstance(result, Mapping) else extra
        return merged, size + count

    def _fitted(self, absolute: str, ref: str, depth: int) -> tuple[Any, int]:
        """The reference expanded as deep as the operation's budget allows."""
        for allowed in range(depth, 0, -1):
            result, size = self._expand_ref(absolute, allowed)
            if size <= self._left:
                self._left -= size
                return result, size
        return cut(ref, f"expanding it would take the tool's schemas past {self.budget} objects"), 1

    def _expand_ref(self, absolute: str, depth: int) -> tuple[Any, int]:
        key = (absolute, depth)
        found = self._expanded.get(key)
        if found is None:
            group = self._group_of(absolute)
            target = self.spec.lookup(absolute)
            home = group if group in self._cyclic else None
            document = self.spec.join(absolute, "")[1]
            found = self._expanded[key] = self._schema(target, document, _Walk(depth - 1, home=home))
        return found

    # -- which references form cycles -------------------------------------------------------------

    def _group_of(self, absolute: str) -> int:
        if absolute not in self._group:
            self._find_groups(absolute)
        return self._group[absolute]

    def _edges_of(self, absolute: str) -> tuple[str, ...]:
        """The references a referenced schema makes itself (not those of what it refers to); none
        for a reference that points nowhere (expanding it is what fails)."""
        if absolute not in self._edges:
            found: list[str] = []
            try:
                target = self.spec.lookup(absolute)
            except SpecError:
                target = None
            self._collect_refs(target, self.spec.join(absolute, "")[1], found, set())
            self._edges[absolute] = tuple(found)
        return self._edges[absolute]

    def _collect_refs(self, node: Any, base: str, found: list[str], containers: set[str]) -> None:
        """The absolute references in a schema's schema positions, not following them (but
        looking through maps and lists given by `$ref`)."""
        if not isinstance(node, Mapping):
            return
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.append(self.spec.join(base, ref)[0])
        for key, value in node.items():
            if key in SCHEMA_MAP or key in SCHEMA_LIST or (key == "items" and isinstance(value, list)):
                members, members_base = value, base
                if is_reference(value):
                    absolute, members_base = self.spec.join(base, value["$ref"])
                    if absolute in containers:
                        continue
                    containers.add(absolute)
                    try:
                        members = self.spec.lookup(absolute)
                    except SpecError:
                        continue
                if isinstance(members, Mapping):
                    members = list(members.values())
                for sub in members if isinstance(members, list) else ():
                    self._collect_refs(sub, members_base, found, containers)
            elif key in SCHEMA_ONE:
                self._collect_refs(value, base, found, containers)

    def _find_groups(self, start: str) -> None:
        """Tarjan's strongly connected components, iteratively, from `start` over the references
        not grouped yet."""
        index: dict[str, int] = {start: 0}
        low: dict[str, int] = {start: 0}
        stack, on_stack = [start], {start}
        work = [(start, iter(self._edges_of(start)))]
        while work:
            node, edges = work[-1]
            for following in edges:
                if following in self._group:
                    continue
                if following not in index:
                    index[following] = low[following] = len(index)
                    stack.append(following)
                    on_stack.add(following)
                    work.append((following, iter(self._edges_of(following))))
                    break
                if following in on_stack:
                    low[node] = min(low[node], index[following])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    self._close_group(node, stack, on_stack)

    def _close_group(self, root: str, stack: list[str], on_stack: set[str]) -> None:
        self._groups_made += 1
        group = self._groups_made
        members = []
        while True:
            member = stack.pop()
            on_stack.discard(member)
            members.append(member)
            self._group[member] = group
            if member == root:
                break
        if len(members) > 1 or root in self._edges_of(root):
            self._cyclic.add(group)


def cut(ref: str, why: str) -> dict[str, Any]:
    return {"description": f"Not expanded here: $ref {ref}, because {why}. Any value is accepted."}


def from_30(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI 3.0 schema object in JSON Schema's words (nullable, exclusive bounds)."""
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        flag = schema.get(exclusive)
        if isinstance(flag, bool):
            del schema[exclusive]
            if flag and bound in schema:
                schema[exclusive] = schema.pop(bound)
    if "nullable" not in schema:
        return schema
    nullable = schema.pop("nullable") is True
    if not nullable:
        return schema
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    elif isinstance(kind, list):
        schema["type"] = kind if "null" in kind else [*kind, "null"]
    elif schema and any(key in schema for key in ("allOf", "oneOf", "anyOf", "$ref", "enum", "const")):
        return {"anyOf": [schema, {"type": "null"}]}
    else:
        return schema
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    return schema
