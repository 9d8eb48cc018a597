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
references are expanded at most `MAX_REF_DEPTH` (10) references deep, and the references of
one operation's schemas add at most `SCHEMA_BUDGET` (32 KiB) of JSON (counted as if copied
out; the parameters first, then the request body, then the response): a reference that would
go past it is expanded less deep, and cut when even one level does not fit. A reference cut
for any of these reasons is replaced by an empty schema (any value) whose description says
why. So a circular or enormous spec costs bounded time, never a `RecursionError`, and no
tool's schemas grow past what a client's `tools/list` and a model can use. A `discriminator`'s
`mapping` is left out: it names the spec's own schemas, which a standalone tool schema has not.

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

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from toolkeeper.downstreams.openapi.spec import LoadedSpec, SpecError

MAX_REF_DEPTH = 10
# About the bytes of JSON the references one operation's schemas inline may add: enough for
# every operation of GitHub's spec but its largest responses, and a bound on what one tool costs
# a client's `tools/list` (and a model's context) whatever a spec's components expand to.
SCHEMA_BUDGET = 32_768

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
    return isinstance(node, dict) and isinstance(node.get("$ref"), str)


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
        # Schemas with no reference (a shared parameter's, say) as they came out, by identity.
        self._plain: dict[tuple[int, str], tuple[Any, Any]] = {}
        self._fitted_count = 0

    def start_operation(self) -> None:
        self._left = self.budget

    def schema(self, node: Any, base: str) -> Any:
        """`node` (one of the operation's own schemas) with its references inlined."""
        key = (id(node), base)
        kept = self._plain.get(key)
        if kept is not None and kept[0] is node:
            return kept[1]
        fitted = self._fitted_count
        result = self._schema(node, base, _Walk(MAX_REF_DEPTH, top=True))[0]
        if self._fitted_count == fitted:  # no reference in it: the same for every operation
            self._plain[key] = (node, result)
        return result

    def _schema(self, node: Any, base: str, walk: _Walk) -> tuple[Any, int]:
        """The schema with its references inlined, and its size: about the bytes of its JSON."""
        if not isinstance(node, dict):
            return node, _data_size(node)
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._follow(node, ref, base, walk)
        size = 2
        out: dict[str, Any] = {}
        for key, value in node.items():
            if _holds_schemas(key, value):
                members = self._container(value, base, walk)
                if members is None:
                    continue
                out[key], count = self._members(*members)
            elif key in SCHEMA_ONE:
                out[key], count = self._schema(value, base, walk)
            elif key == "required" and not isinstance(value, list):
                continue  # `required: true` on a property (Swagger's habit) would make the schema invalid
            elif key == "discriminator" and isinstance(value, dict):
                # Its `mapping` names the spec's own schemas, which a standalone tool schema has
                # not (and Graph's list hundreds of them in every entity).
                out[key] = {k: v for k, v in value.items() if k != "mapping"}
                count = _data_size(out[key])
            else:
                out[key], count = value, _data_size(value)
            size += len(key) + 4 + count
        return (from_30(out) if self.is_30 else out), size

    def _members(self, found: Any, base: str, walk: _Walk) -> tuple[Any, int]:
        """A map or list of schemas with each member expanded; anything else kept as written."""
        size = 2
        if isinstance(found, dict):
            expanded: dict[str, Any] = {}
            for name, sub in found.items():
                expanded[name], count = self._schema(sub, base, walk)
                size += len(name) + 4 + count
            return expanded, size
        if isinstance(found, list):
            items: list[Any] = []
            for sub in found:
                item, count = self._schema(sub, base, walk)
                items.append(item)
                size += count + 1
            return items, size
        return found, _data_size(found)

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
        if isinstance(found, dict) and len(value) > 1:
            found = {**found, **{k: v for k, v in value.items() if k != "$ref"}}
        return found, document, replace(walk, containers=walk.containers | {absolute})

    def _follow(self, node: Mapping[str, Any], ref: str, base: str, walk: _Walk) -> tuple[Any, int]:
        absolute = self.spec.join(base, ref)[0]
        result: Any
        if walk.home is not None and self._group_of(absolute) == walk.home:
            result = cut(ref, "it refers back to a schema that contains it (a cycle)")
            size = _data_size(result)
        elif walk.depth <= 0:
            result = cut(ref, "it is nested deeper than this tool's schemas go")
            size = _data_size(result)
        elif walk.top:
            result, size = self._fitted(absolute, ref, walk.depth)
        else:
            result, size = self._expand_ref(absolute, walk.depth)
        if len(node) == 1:
            return result, size
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        extra, count = self._schema(siblings, base, walk)
        merged = {**result, **extra} if isinstance(result, dict) else extra
        return merged, size + count

    def _fitted(self, absolute: str, ref: str, depth: int) -> tuple[Any, int]:
        """The reference expanded as deep as the operation's budget allows."""
        self._fitted_count += 1
        for allowed in range(depth, 0, -1):
            result, size = self._expand_ref(absolute, allowed)
            if size <= self._left:
                self._left -= size
                return result, size
        result = cut(ref, f"expanding it would take the tool's schemas past {self.budget} bytes")
        return result, _data_size(result)

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
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.append(self.spec.join(base, ref)[0])
        for key, value in node.items():
            if _holds_schemas(key, value):
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
                if isinstance(members, dict):
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


def _holds_schemas(key: str, value: Any) -> bool:
    """Whether a keyword's value is a map or a list of schemas."""
    return key in SCHEMA_MAP or key in SCHEMA_LIST or (key == "items" and isinstance(value, list))


def _data_size(value: Any) -> int:
    """About the bytes of `value` as JSON (a string's escapes not counted)."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict | list):
        try:
            return len(orjson.dumps(value))
        except (TypeError, orjson.JSONEncodeError):  # an integer past 64 bits
            return len(json.dumps(value))
    return 5


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
