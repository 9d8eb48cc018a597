"""An OpenAPI spec's operations as MCP tools: names, input and output schemas, hints.

Names. A tool is named after its operation's `operationId`, or `method_path` when it has none
(`get /pets/{petId}` → `get_pets_petId`): every run of characters outside `[A-Za-z0-9_-]`
becomes one `_`, and `_` at either end is dropped. A name longer than 64 characters, and every
name two or more operations would share, ends instead in `_` and a stable suffix: the first 8
hex digits of the SHA-256 of `METHOD path` (one operation's own, whatever else the spec holds),
after the name's first 55 characters. All the operations that share a name get a suffix, not
all but the first, so the names do not depend on the order of the operations; and names are
made over every operation of the spec before `include`/`exclude` choose, so filtering never
renames a tool. (Should a suffixed name still meet another, its suffix grows to 16 digits.)
The operationId, method and path as written are in the tool's
`_meta["toolkeeper/openapi"]`.

Arguments. A tool's `inputSchema` is an object whose properties are the operation's path,
query, header and cookie parameters (the path item's, overridden by the operation's of the
same name and place; `Accept`, `Content-Type` and `Authorization` headers are ignored, as the
OpenAPI specification says), then its JSON request body. Each takes its HTTP name as its
argument, in this order: path, query, header, cookie parameters (each in the order written),
then body properties. A name already taken by an earlier one gets its place as a suffix:
`id__query`, `id__header`, `name__body` (then `id__query2`, … should that be taken too).
A parameter's `description` is kept (over its schema's).

The JSON request body (`application/json`, then any `…+json`, then `*/*`) is flattened into
the arguments when its schema is an object with `properties` and nothing that a flat list
cannot say (no `allOf`/`oneOf`/`anyOf`/`not`/`if` at its top, no `additionalProperties`
allowed); its `readOnly` properties are left out, as a client must not send them. Any other
JSON body is one argument, `body`. An operation whose request body has no JSON form
(multipart uploads, forms, binary) is skipped, with its media types in the reason.

Schemas. Every `$ref` is inlined, resolved with `referencing` through the spec's registry, so a
tool's schemas stand alone. References that form a cycle (a schema that contains itself, or
schemas that contain each other) are cut at depth one: such a schema is expanded where it is
first reached from outside its cycle, and inside it every reference back into the cycle is cut.
Other references are expanded at most `MAX_REF_DEPTH` (10) references deep, and an operation's
schemas hold at most `SCHEMA_BUDGET` (5,000) schema objects: a reference that would go past it
is expanded less deep, and cut when even one level does not fit. A reference cut for any of
these reasons is replaced by an empty schema (any value) whose description says why. So a
circular or enormous spec costs bounded time, never a `RecursionError`. `allOf`, `oneOf` and
`anyOf` are kept, each branch resolved. OpenAPI 3.0's `nullable: true` becomes `null` among the
`type`s (or an `anyOf` with `{"type": "null"}` when there is no `type`), and its boolean
`exclusiveMinimum`/`exclusiveMaximum` become JSON Schema's numbers. A `required` that is not a
list (`required: true` on a property, as Swagger wrote it) is dropped, as it would make the whole
schema invalid. Example and default values are kept as written, never read as schemas.

`outputSchema` is the JSON schema of the first 2xx response (`200`…`299`, then `2XX`) that has
one, when it is an object schema (`type: object`, or `properties` with no `type`), as MCP
requires; an array or scalar response gets no `outputSchema` (it is not wrapped), so the
source returns its JSON as text, with no structured content required.

Hints. `method_hints` follow the method table exactly (GET/HEAD/OPTIONS read-only and
idempotent, POST/PATCH neither, PUT idempotent, DELETE destructive and idempotent; each with
the other hints false; TRACE none) with `openWorldHint` from the source's `openWorld`.
`declared_hints` are the operation's `x-mcp-annotations` (hint names with boolean values, and
`title`). The tool's `annotations` are the method's hints with the declared ones over them.

Security. `Operation.security` (also `Conversion.operation_security`, by tool name) lists the
alternative requirement sets, each a tuple of scheme names that must all be satisfied; `()`
means the operation needs none; a set `()` among others means it may be called without any.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urldefrag, urljoin, urlsplit

import orjson

from toolkeeper.downstreams.openapi.spec import HTTP_METHODS, LoadedSpec, SpecError

ParameterLocation = Literal["path", "query", "header", "cookie"]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NAME_MAX = 64
SUFFIX_DIGITS = 8
MAX_REF_DEPTH = 10
SCHEMA_BUDGET = 5_000
HINT_NAMES = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
META_KEY = "toolkeeper/openapi"

# The method table: each method's hints, exactly.
METHOD_HINTS: Mapping[str, Mapping[str, bool]] = {
    "GET": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
    "HEAD": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
    "OPTIONS": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
    "POST": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "PUT": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
    "PATCH": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "DELETE": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
}
IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})
DEFAULT_STYLE: Mapping[str, str] = {"path": "simple", "query": "form", "header": "simple", "cookie": "form"}
LOCATION_ORDER: tuple[ParameterLocation, ...] = ("path", "query", "header", "cookie")

# Keywords whose value is a schema, a list of schemas, or a map of names to schemas; every other
# keyword's value (examples, defaults, enums, extensions) is data, kept as written.
_SCHEMA_ONE = frozenset(
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
_SCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_NOT_FLAT = ("allOf", "oneOf", "anyOf", "not", "if")


@dataclass(frozen=True)
class Parameter:
    name: str
    location: ParameterLocation
    argument: str
    required: bool
    style: str
    explode: bool
    allow_reserved: bool = False
    content_type: str | None = None  # set when the parameter is described by `content`: send it so encoded


@dataclass(frozen=True)
class Operation:
    tool_name: str
    method: str
    path: str
    operation_id: str | None
    parameters: tuple[Parameter, ...]
    body_arguments: Mapping[str, str] | None
    body_argument: str | None
    body_required: bool
    method_hints: Mapping[str, bool]
    declared_hints: Mapping[str, Any]
    tool: Mapping[str, Any]
    body_media_type: str | None = None  # the JSON media type to send the body as
    security: tuple[tuple[str, ...], ...] = ()
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Skipped:
    method: str
    path: str
    operation_id: str | None
    reason: str


@dataclass(frozen=True)
class Selection:
    """Operations chosen by operationId globs, tags or methods. As `include`, an operation must
    match every criterion given (any of its values); as `exclude`, matching any one criterion
    excludes it. An operation without an operationId is matched by its tool name."""

    operation_ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()

    def criteria(self, *, name: str, tags: tuple[str, ...], method: str) -> dict[str, bool]:
        """Each criterion given, and whether the operation matches it."""
        found: dict[str, bool] = {}
        if self.operation_ids:
            found["operationId"] = any(fnmatch.fnmatchcase(name, glob) for glob in self.operation_ids)
        if self.tags:
            found["tags"] = any(tag in self.tags for tag in tags)
        if self.methods:
            found["methods"] = method in {m.upper() for m in self.methods}
        return found

    def describe(self, criterion: str) -> str:
        values = {"operationId": self.operation_ids, "tags": self.tags, "methods": self.methods}[criterion]
        return f"{criterion} {', '.join(values)}"


@dataclass(frozen=True)
class SecurityScheme:
    name: str
    type: str  # apiKey, http (what a source can send), or oauth2, openIdConnect, mutualTLS
    location: str | None
    parameter: str | None
    scheme: str | None


@dataclass(frozen=True)
class Conversion:
    operations: tuple[Operation, ...]
    skipped: tuple[Skipped, ...]
    servers: tuple[str, ...]
    security_schemes: Mapping[str, SecurityScheme]
    operation_security: Mapping[str, tuple[tuple[str, ...], ...]]
    warnings: tuple[str, ...] = ()


class _Unsupported(Exception):
    """An operation the converter cannot express: the message is the reason it is skipped."""


@dataclass(frozen=True)
class _Found:
    """One operation as written: where it stands and what it says."""

    method: str
    path: str
    item: Mapping[str, Any]
    item_base: str
    operation: Mapping[str, Any]
    base: str

    @property
    def operation_id(self) -> str | None:
        value = self.operation.get("operationId")
        return value if isinstance(value, str) and value else None

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(tag for tag in self.operation.get("tags", ()) if isinstance(tag, str))


def convert(
    spec: LoadedSpec,
    *,
    include: Selection | None = None,
    exclude: Selection | None = None,
    open_world: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Conversion:
    """The tools `spec`'s operations become, what was skipped and why, its servers and security.
    `progress` hears (done, total) operations as they are converted."""
    found = list(_operations_of(spec))
    names = tool_names([(f.method, f.path, f.operation_id) for f in found])
    expander = _Expander(spec)
    root_security = _security_of(spec.document.get("security"))
    operations: list[Operation] = []
    skipped: list[Skipped] = []
    for done, (entry, name) in enumerate(zip(found, names, strict=True)):
        if progress is not None:
            progress(done, len(found))
        reason = _filtered_out(entry, name=name, include=include, exclude=exclude)
        if reason is None:
            try:
                operation = _convert_one(
                    entry, name=name, expander=expander, open_world=open_world, root_security=root_security
                )
            except (_Unsupported, SpecError) as exc:
                reason = str(exc)
            except RecursionError:
                reason = "a schema is nested too deeply to convert"
            else:
                operations.append(operation)
        if reason is not None:
            skipped.append(Skipped(entry.method, entry.path, entry.operation_id, reason))
    servers, warnings = _servers(spec)
    return Conversion(
        operations=tuple(operations),
        skipped=tuple(skipped),
        servers=servers,
        security_schemes=_security_schemes(spec),
        operation_security={op.tool_name: op.security for op in operations},
        warnings=warnings,
    )


def _operations_of(spec: LoadedSpec) -> list[_Found]:
    paths, paths_base = spec.resolve(spec.document.get("paths") or {}, spec.uri)
    found: list[_Found] = []
    for path, written in paths.items():
        if not path.startswith("/"):  # an `x-` extension
            continue
        item, item_base = spec.resolve(written, paths_base)
        for method in item:
            if method not in HTTP_METHODS:
                continue
            operation, base = spec.resolve(item[method], item_base)
            found.append(_Found(method.upper(), path, item, item_base, operation, base))
    return found


# -- names ----------------------------------------------------------------------------------------


def tool_names(operations: list[tuple[str, str, str | None]]) -> list[str]:
    """The tool name of each (method, path, operationId), by the rule in the module's docstring."""
    plain = [
        _clean(operation_id or f"{method.lower()} {path}", method)
        for method, path, operation_id in operations
    ]
    counts = Counter(plain)
    names = [
        name if len(name) <= NAME_MAX and counts[name] == 1 else _suffixed(name, method, path, SUFFIX_DIGITS)
        for name, (method, path, _) in zip(plain, operations, strict=True)
    ]
    counts = Counter(names)
    if len(counts) < len(names):
        names = [
            name if counts[name] == 1 else _suffixed(base, method, path, 2 * SUFFIX_DIGITS)
            for name, base, (method, path, _) in zip(names, plain, operations, strict=True)
        ]
    return names


def _clean(raw: str, method: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", raw).strip("_") or method.lower()


def _suffixed(name: str, method: str, path: str, digits: int) -> str:
    digest = hashlib.sha256(f"{method.upper()} {path}".encode()).hexdigest()[:digits]
    return f"{name[: NAME_MAX - digits - 1]}_{digest}"


# -- choosing -------------------------------------------------------------------------------------


def _filtered_out(
    entry: _Found, *, name: str, include: Selection | None, exclude: Selection | None
) -> str | None:
    matched_name = entry.operation_id or name
    if include is not None:
        criteria = include.criteria(name=matched_name, tags=entry.tags, method=entry.method)
        missed = [criterion for criterion, matches in criteria.items() if not matches]
        if missed:
            return "not included: " + "; ".join(include.describe(c) for c in missed)
    if exclude is not None:
        criteria = exclude.criteria(name=matched_name, tags=entry.tags, method=entry.method)
        hit = [criterion for criterion, matches in criteria.items() if matches]
        if hit:
            return "excluded: " + "; ".join(exclude.describe(c) for c in hit)
    return None


# -- one operation --------------------------------------------------------------------------------


@dataclass
class _Arguments:
    """The inputSchema's properties as they are claimed, in the documented order."""

    properties: dict[str, Any]
    required: list[str]

    def claim(self, name: str, location: str) -> str:
        if name not in self.properties:
            return name
        candidate, number = f"{name}__{location}", 2
        while candidate in self.properties:
            candidate, number = f"{name}__{location}{number}", number + 1
        return candidate

    def add(self, argument: str, schema: Any, *, required: bool) -> None:
        self.properties[argument] = schema
        if required:
            self.required.append(argument)

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = self.required
        return schema


def _convert_one(
    entry: _Found,
    *,
    name: str,
    expander: _Expander,
    open_world: bool,
    root_security: tuple[tuple[str, ...], ...],
) -> Operation:
    expander.start_operation()
    arguments = _Arguments({}, [])
    parameters = _parameters(entry, expander=expander, arguments=arguments)
    body = _body(entry, expander=expander, arguments=arguments)
    output = _output_schema(entry, expander=expander)
    method_hints = {**METHOD_HINTS.get(entry.method, {}), "openWorldHint": open_world}
    declared = _declared_hints(entry.operation.get("x-mcp-annotations"))
    summary = entry.operation.get("summary")
    description = entry.operation.get("description")
    tool: dict[str, Any] = {"name": name}
    if isinstance(summary, str) and summary.strip():
        tool["title"] = summary.strip()
    tool["description"] = next(
        (text.strip() for text in (description, summary) if isinstance(text, str) and text.strip()),
        f"{entry.method} {entry.path}",
    )
    tool["inputSchema"] = arguments.schema()
    if output is not None:
        tool["outputSchema"] = output
    tool["annotations"] = {**method_hints, **declared}
    tool["_meta"] = {
        META_KEY: {"operationId": entry.operation_id, "method": entry.method, "path": entry.path}
    }
    security = _security_of(entry.operation["security"]) if "security" in entry.operation else root_security
    return Operation(
        tool_name=name,
        method=entry.method,
        path=entry.path,
        operation_id=entry.operation_id,
        parameters=parameters,
        body_arguments=body.arguments,
        body_argument=body.argument,
        body_required=body.required,
        method_hints=method_hints,
        declared_hints=declared,
        # A copy of its own: inlined schemas are shared between operations while converting.
        tool=orjson.loads(orjson.dumps(tool)),
        body_media_type=body.media_type,
        security=security,
        tags=entry.tags,
    )


def _parameters(entry: _Found, *, expander: _Expander, arguments: _Arguments) -> tuple[Parameter, ...]:
    spec = expander.spec
    written: dict[tuple[str, str], tuple[Mapping[str, Any], str]] = {}
    for source, base in ((entry.item, entry.item_base), (entry.operation, entry.base)):
        for node in source.get("parameters", ()):
            parameter, parameter_base = spec.resolve(node, base)
            written[(parameter["name"], parameter["in"])] = (parameter, parameter_base)
    placed: list[Parameter] = []
    for location in LOCATION_ORDER:
        for (name, where), (parameter, base) in written.items():
            if where != location or (location == "header" and name.lower() in IGNORED_HEADERS):
                continue
            placed.append(_parameter(parameter, base=base, expander=expander, arguments=arguments))
    return tuple(placed)


def _parameter(
    parameter: Mapping[str, Any], *, base: str, expander: _Expander, arguments: _Arguments
) -> Parameter:
    name, location = parameter["name"], parameter["in"]
    content_type = None
    if "schema" in parameter:
        schema = expander.schema(parameter["schema"], base)
    elif isinstance(parameter.get("content"), Mapping) and parameter["content"]:
        content_type, media = next(iter(parameter["content"].items()))
        media, media_base = expander.spec.resolve(media, base)
        schema = expander.schema(media.get("schema", {}), media_base) if isinstance(media, Mapping) else {}
    else:
        schema = {}
    shown = dict(schema) if isinstance(schema, Mapping) else {}
    if isinstance(parameter.get("description"), str):
        shown["description"] = parameter["description"]
    if parameter.get("deprecated") is True:
        shown["deprecated"] = True
    required = location == "path" or parameter.get("required") is True
    argument = arguments.claim(name, location)
    arguments.add(argument, shown, required=required)
    written_style = parameter.get("style")
    style = written_style if isinstance(written_style, str) else DEFAULT_STYLE[location]
    explode = parameter.get("explode")
    return Parameter(
        name=name,
        location=location,
        argument=argument,
        required=required,
        style=style,
        explode=explode if isinstance(explode, bool) else style == "form",
        allow_reserved=parameter.get("allowReserved") is True,
        content_type=content_type,
    )


@dataclass(frozen=True)
class _Body:
    arguments: Mapping[str, str] | None = None
    argument: str | None = None
    required: bool = False
    media_type: str | None = None


def _json_media(content: Mapping[str, Any]) -> str | None:
    """The JSON media type among a content map's keys: application/json, any +json, */*."""
    kinds = {media.split(";")[0].strip().lower(): media for media in content}
    for wanted in ("application/json",):
        if wanted in kinds:
            return kinds[wanted]
    for kind, media in kinds.items():
        if kind.endswith("+json"):
            return media
    return kinds.get("*/*")


def _body(entry: _Found, *, expander: _Expander, arguments: _Arguments) -> _Body:
    if "requestBody" not in entry.operation:
        return _Body()
    body, base = expander.spec.resolve(entry.operation["requestBody"], entry.base)
    content = body["content"]
    if not content:
        return _Body()
    media = _json_media(content)
    if media is None:
        raise _Unsupported(
            f"request body only as {', '.join(content)}, which toolkeeper does not send (JSON bodies only)"
        )
    required = body.get("required") is True
    described, media_base = expander.spec.resolve(content[media], base)
    raw = described.get("schema", {}) if isinstance(described, Mapping) else {}
    schema = expander.schema(raw, media_base)
    if _flattens(schema):
        flat: dict[str, str] = {}
        wanted = schema.get("required", [])
        for prop, prop_schema in schema["properties"].items():
            if isinstance(prop_schema, Mapping) and prop_schema.get("readOnly") is True:
                continue
            argument = arguments.claim(prop, "body")
            arguments.add(argument, prop_schema, required=required and prop in wanted)
            flat[argument] = prop
        return _Body(arguments=flat, required=required, media_type=media)
    argument = arguments.claim("body", "body")
    shown = dict(schema) if isinstance(schema, Mapping) else {}
    if isinstance(body.get("description"), str) and "description" not in shown:
        shown["description"] = body["description"]
    arguments.add(argument, shown, required=required)
    return _Body(argument=argument, required=required, media_type=media)


def _flattens(schema: Any) -> bool:
    return (
        isinstance(schema, Mapping)
        and schema.get("type", "object") == "object"
        and isinstance(schema.get("properties"), Mapping)
        and not any(keyword in schema for keyword in _NOT_FLAT)
        and schema.get("additionalProperties", False) is False
    )


def _output_schema(entry: _Found, *, expander: _Expander) -> dict[str, Any] | None:
    responses = entry.operation.get("responses") or {}
    statuses = sorted(s for s in responses if re.fullmatch(r"2\d\d", s)) + [
        s for s in responses if s.upper() == "2XX"
    ]
    for status in statuses:
        response, base = expander.spec.resolve(responses[status], entry.base)
        content = response.get("content")
        if not isinstance(content, Mapping) or not content:
            continue
        media = _json_media(content)
        if media is None:
            return None
        described, media_base = expander.spec.resolve(content[media], base)
        if not isinstance(described, Mapping) or "schema" not in described:
            return None
        schema = expander.schema(described["schema"], media_base)
        if not isinstance(schema, Mapping):
            return None
        if schema.get("type") == "object":
            return dict(schema)
        if "type" not in schema and isinstance(schema.get("properties"), Mapping):
            return {"type": "object", **schema}
        return None
    return None


def _declared_hints(extension: Any) -> dict[str, Any]:
    if not isinstance(extension, Mapping):
        return {}
    declared: dict[str, Any] = {
        name: extension[name] for name in HINT_NAMES if isinstance(extension.get(name), bool)
    }
    if isinstance(extension.get("title"), str):
        declared["title"] = extension["title"]
    return declared


def _security_of(requirements: Any) -> tuple[tuple[str, ...], ...]:
    if not isinstance(requirements, list):
        return ()
    return tuple(tuple(sorted(req)) for req in requirements if isinstance(req, Mapping))


# -- schemas --------------------------------------------------------------------------------------


class _Expander:
    """Inlines a schema's `$ref`s, by the rule in the module's docstring.

    What a reference expands to depends only on the reference and how many references deep it
    may still go, so each (reference, depth) is expanded once per spec and shared; its size
    (schema objects and lists, counted as if copied out) is kept beside it, so an operation's
    budget is checked without walking what was shared.

    Cycles: references are grouped into strongly connected components (Tarjan's algorithm over
    the graph of which schema refers to which). A schema whose group is a cycle is expanded
    where it is reached from outside its group; inside that expansion every reference into the
    same group is cut. So a cycle unfolds once, whatever path led to it.
    """

    def __init__(self, spec: LoadedSpec) -> None:
        self.spec = spec
        self.is_30 = spec.is_30
        self._expanded: dict[tuple[str, int], tuple[Any, int]] = {}
        self._edges: dict[str, tuple[str, ...]] = {}
        self._group: dict[str, int] = {}
        self._cyclic: set[int] = set()
        self._groups_made = 0
        self._budget = SCHEMA_BUDGET

    def start_operation(self) -> None:
        self._budget = SCHEMA_BUDGET

    def schema(self, node: Any, base: str) -> Any:
        """`node` (one of the operation's own schemas) with its references inlined."""
        return self._schema(node, base, depth=MAX_REF_DEPTH, home=None, top=True)[0]

    def _schema(self, node: Any, base: str, *, depth: int, home: int | None, top: bool) -> tuple[Any, int]:
        if not isinstance(node, Mapping):
            return node, 1
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._follow(node, ref, base, depth=depth, home=home, top=top)
        size = 1
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _SCHEMA_MAP and isinstance(value, Mapping):
                expanded: dict[str, Any] = {}
                for name, sub in value.items():
                    expanded[name], count = self._schema(sub, base, depth=depth, home=home, top=top)
                    size += count
                out[key] = expanded
            elif (key in _SCHEMA_LIST or key == "items") and isinstance(value, list):
                items: list[Any] = []
                for sub in value:
                    item, count = self._schema(sub, base, depth=depth, home=home, top=top)
                    items.append(item)
                    size += count
                out[key] = items
            elif key in _SCHEMA_ONE:
                out[key], count = self._schema(value, base, depth=depth, home=home, top=top)
                size += count
            elif key == "required" and not isinstance(value, list):
                continue  # `required: true` on a property (Swagger's habit) would make the schema invalid
            else:
                out[key] = value
        return (_from_30(out) if self.is_30 else out), size

    def _follow(
        self, node: Mapping[str, Any], ref: str, base: str, *, depth: int, home: int | None, top: bool
    ) -> tuple[Any, int]:
        absolute = self.spec.join(base, ref)[0]
        result: Any
        if home is not None and self._group_of(absolute) == home:
            result, size = _cut(ref, "it refers back to a schema that contains it (a cycle)"), 1
        elif depth <= 0:
            result, size = _cut(ref, f"it is more than {MAX_REF_DEPTH} references deep"), 1
        elif top:
            result, size = self._fitted(absolute, ref, depth)
        else:
            result, size = self._expand_ref(absolute, depth)
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        if not siblings:
            return result, size
        extra, count = self._schema(siblings, base, depth=depth, home=home, top=top)
        merged = {**result, **extra} if isinstance(result, Mapping) else extra
        return merged, size + count

    def _fitted(self, absolute: str, ref: str, depth: int) -> tuple[Any, int]:
        """The reference expanded as deep as the operation's budget allows."""
        for allowed in range(depth, 0, -1):
            result, size = self._expand_ref(absolute, allowed)
            if size <= self._budget:
                self._budget -= size
                return result, size
        return _cut(ref, f"expanding it would take the tool's schemas past {SCHEMA_BUDGET} objects"), 1

    def _expand_ref(self, absolute: str, depth: int) -> tuple[Any, int]:
        key = (absolute, depth)
        if key not in self._expanded:
            group = self._group_of(absolute)
            target = self.spec.lookup(absolute)
            home = group if group in self._cyclic else None
            document = self.spec.join(absolute, "")[1]
            self._expanded[key] = self._schema(target, document, depth=depth - 1, home=home, top=False)
        return self._expanded[key]

    # -- which references form cycles -------------------------------------------------------------

    def _group_of(self, absolute: str) -> int:
        if absolute not in self._group:
            self._find_groups(absolute)
        return self._group[absolute]

    def _edges_of(self, absolute: str) -> tuple[str, ...]:
        """The references a referenced schema makes itself (not those of what it refers to)."""
        if absolute not in self._edges:
            found: list[str] = []
            _collect_refs(self.spec.lookup(absolute), urldefrag(absolute).url, found)
            self._edges[absolute] = tuple(found)
        return self._edges[absolute]

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


def _collect_refs(node: Any, base: str, found: list[str]) -> None:
    """The absolute references in a schema's schema positions, not following them."""
    if not isinstance(node, Mapping):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        found.append(urljoin(base, ref))
    for key, value in node.items():
        if key in _SCHEMA_MAP and isinstance(value, Mapping):
            for sub in value.values():
                _collect_refs(sub, base, found)
        elif (key in _SCHEMA_LIST or key == "items") and isinstance(value, list):
            for sub in value:
                _collect_refs(sub, base, found)
        elif key in _SCHEMA_ONE:
            _collect_refs(value, base, found)


def _cut(ref: str, why: str) -> dict[str, Any]:
    return {"description": f"Not expanded here: $ref {ref}, because {why}. Any value is accepted."}


def _from_30(schema: dict[str, Any]) -> dict[str, Any]:
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


# -- servers and security -------------------------------------------------------------------------


def _servers(spec: LoadedSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    written = spec.document.get("servers") or [{"url": "/"}]
    on_network = spec.uri.startswith(("http://", "https://"))
    servers: list[str] = []
    warnings: list[str] = []
    for server in written:
        server, _ = spec.resolve(server, spec.uri)
        url = _with_variables(server["url"], server.get("variables"))
        if not urlsplit(url).scheme:
            if not on_network:
                warnings.append(
                    f"server URL {url!r} is relative and the spec is a local file: it cannot be resolved "
                    "(set baseUrl)"
                )
                continue
            url = urljoin(spec.uri, url)
        if urlsplit(url).scheme not in ("http", "https"):
            warnings.append(f"server URL {url!r} is not http(s): left out")
            continue
        servers.append(url.rstrip("/"))
    return tuple(servers), tuple(warnings)


def _with_variables(url: str, variables: Any) -> str:
    if not isinstance(variables, Mapping):
        return url
    for name, variable in variables.items():
        if isinstance(variable, Mapping) and isinstance(variable.get("default"), str):
            url = url.replace("{" + name + "}", variable["default"])
    return url


def _security_schemes(spec: LoadedSpec) -> dict[str, SecurityScheme]:
    components, base = spec.resolve(spec.document.get("components") or {}, spec.uri)
    schemes, base = spec.resolve(components.get("securitySchemes") or {}, base)
    found: dict[str, SecurityScheme] = {}
    for name, written in schemes.items():
        scheme, _ = spec.resolve(written, base)
        kind = scheme["type"]
        found[name] = SecurityScheme(
            name=name,
            type=kind,
            location=scheme.get("in") if kind == "apiKey" else None,
            parameter=scheme.get("name") if kind == "apiKey" else None,
            scheme=scheme["scheme"].lower() if kind == "http" else None,
        )
    return found
