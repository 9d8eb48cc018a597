"""An OpenAPI spec's operations as MCP tools: names, input and output schemas, hints.

Names. A tool is named after its operation's `operationId`, or `method_path` when it has none
(`get /pets/{petId}` → `get_pets_petId`): every run of characters outside `[A-Za-z0-9_-]`
becomes one `_`, and `_` at either end is dropped. A name is never shortened here: MCP's
64-character limit applies to the name a client sees, which the catalog makes once, after the
server's prefix is added (`catalog/identity.py`), so a long name is cut once, with one hash.
Every name two or more operations would share ends instead in `_` and a stable suffix: the
first 8 hex digits of the SHA-256 of `METHOD path` (one operation's own, whatever else the spec
holds). All the operations that share a name get a suffix, not all but the first, so the names
do not depend on the order of the operations; an operation added to the spec renames no other
(unless it takes a name another already has); and names are made over every operation of the
spec before `include`/`exclude` choose, so filtering never renames a tool. (Should a suffixed
name still meet another, its suffix grows to 16 digits.) The operationId, method and path as
written are in the tool's `_meta["toolkeeper/openapi"]`.

Arguments. A tool's `inputSchema` is an object whose properties are the operation's path,
query, header and cookie parameters (the path item's, overridden by the operation's of the
same name and place; `Accept`, `Content-Type` and `Authorization` headers are ignored, as the
OpenAPI specification says), then its request body's. Each takes its HTTP name as its
argument, in this order: path, query, header, cookie parameters (each in the order written),
then body properties. A name already taken by an earlier one gets its place as a suffix:
`id__query`, `id__header`, `name__body` (then `id__query2`, … should that be taken too).
A parameter's `description` is kept (over its schema's). Which body media type is sent, and
how its arguments give it (JSON, forms, multipart with files, text, bytes), is in `bodies.py`;
an operation whose body can be sent in none of them is skipped, with its media types in the
reason.

References. A `$ref` is followed wherever OpenAPI allows one: path items, parameters, request
bodies, media types, responses, the `paths`, `content` and `responses` maps themselves, and
every schema position (`schemas.py`: schemas are inlined, maps of schemas given by `$ref`
included, cycles cut, each tool's schemas bounded). A Reference Object's `summary` and
`description` written beside its `$ref` (OpenAPI 3.1) are kept over the target's. A reference
that cannot be resolved, or leads to something that is not the object it should be, skips the
one operation that needs it, with the reference named; a path item that cannot be resolved
skips its operations (reported as method `*`). So does a problem the loader found in an
operation or path item (`LoadedSpec.problems`).

Schemas are shared, not copied: what a shared component expands to is built once per spec and
the same objects stand in every tool that uses it, so a tool's schemas are read-only (copy
before changing one, as the gateway's layers do).

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
import gc
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

from toolkeeper.downstreams.openapi.bodies import Body, BodyKind, FieldEncoding, Unsupported, read_body
from toolkeeper.downstreams.openapi.schemas import Expander, is_reference
from toolkeeper.downstreams.openapi.spec import HTTP_METHODS, LoadedSpec, SpecError

ParameterLocation = Literal["path", "query", "header", "cookie"]

SUFFIX_DIGITS = 8
HINT_NAMES = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
META_KEY = "toolkeeper/openapi"
PROGRESS_EVERY = 250  # operations between two calls of `convert`'s `progress`

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
    body_media_type: str | None = None  # the media type to send the body as
    security: tuple[tuple[str, ...], ...] = ()
    tags: tuple[str, ...] = ()
    body_kind: BodyKind = "json"
    body_encodings: Mapping[str, FieldEncoding] = field(default_factory=dict)  # form and multipart fields


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
    `progress`, when given, is called with (operations done, operations in all) every
    `PROGRESS_EVERY` operations and at the end."""
    found, skipped = _operations_of(spec)
    names = tool_names([(f.method, f.path, f.operation_id) for f in found])
    expander = Expander(spec)
    root_security = _security_of(spec.document.get("security"))
    problems: Mapping[tuple[str, str], str] = getattr(spec, "problems", {})
    operations: list[Operation] = []
    with _collector_paused():
        for done, (entry, name) in enumerate(zip(found, names, strict=True), start=1):
            reason = problems.get((entry.path, entry.method.lower())) or _filtered_out(
                entry, name=name, include=include, exclude=exclude
            )
            if reason is None:
                try:
                    operation = _convert_one(
                        entry,
                        name=name,
                        expander=expander,
                        open_world=open_world,
                        root_security=root_security,
                    )
                except (Unsupported, SpecError) as exc:
                    reason = str(exc)
                except RecursionError:
                    reason = "a schema is nested too deeply to convert"
                else:
                    operations.append(operation)
            if reason is not None:
                skipped.append(Skipped(entry.method, entry.path, entry.operation_id, reason))
            if progress is not None and (done % PROGRESS_EVERY == 0 or done == len(found)):
                progress(done, len(found))
    if progress is not None and not found:
        progress(0, 0)
    servers, warnings = _servers(spec)
    return Conversion(
        operations=tuple(operations),
        skipped=tuple(skipped),
        servers=servers,
        security_schemes=_security_schemes(spec),
        operation_security={op.tool_name: op.security for op in operations},
        warnings=warnings,
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while converting: the conversion makes no cycles,
    but its millions of new dicts set off collections that walk the whole spec again and
    again, half of Microsoft Graph's conversion time. It is on again at the end (unless it was
    off before); reference counting frees memory meanwhile as ever."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _operations_of(spec: LoadedSpec) -> tuple[list[_Found], list[Skipped]]:
    """Every operation as written, and those that cannot even be found (a path item or an
    operation whose `$ref` points nowhere, or a path item the loader found a problem in)."""
    problems: Mapping[tuple[str, str], str] = getattr(spec, "problems", {})
    paths, paths_base = mapping_of(spec, spec.document.get("paths") or {}, spec.uri, "paths")
    found: list[_Found] = []
    skipped: list[Skipped] = []
    for path, written in paths.items():
        if not path.startswith("/"):  # an `x-` extension
            continue
        try:
            if (path, "") in problems:
                raise SpecError(problems[(path, "")])
            item, item_base = mapping_of(spec, written, paths_base, f"the path item {path}")
        except SpecError as exc:
            skipped.append(Skipped("*", path, None, str(exc)))
            continue
        for method in item:
            if method not in HTTP_METHODS:
                continue
            try:
                operation, base = mapping_of(spec, item[method], item_base, f"{method.upper()} {path}")
            except SpecError as exc:
                skipped.append(Skipped(method.upper(), path, None, str(exc)))
                continue
            found.append(_Found(method.upper(), path, item, item_base, operation, base))
    return found, skipped


def mapping_of(spec: LoadedSpec, node: Any, base: str, what: str) -> tuple[Mapping[str, Any], str]:
    """An OpenAPI object, through its `$ref`s, and the URI of the document it stands in; its
    `summary` and `description` written beside a `$ref` (3.1) over the target's. Raises
    `SpecError` naming `what` when it is not an object."""
    found, found_base = spec.resolve(node, base)
    if not isinstance(found, Mapping):
        shown = (
            "a list" if isinstance(found, list) else "null" if found is None else f"a {type(found).__name__}"
        )
        pointer = f" (through $ref {node['$ref']})" if is_reference(node) else ""
        raise SpecError(f"{what}{pointer} is {shown}, not an object")
    if is_reference(node) and len(node) > 1:
        written = {key: node[key] for key in ("summary", "description") if key in node}
        if written:
            found = {**found, **written}
    return found, found_base


# -- names ----------------------------------------------------------------------------------------


def tool_names(operations: list[tuple[str, str, str | None]]) -> list[str]:
    """The tool name of each (method, path, operationId), by the rule in the module's docstring."""
    plain = [
        _clean(operation_id or f"{method.lower()} {path}", method)
        for method, path, operation_id in operations
    ]
    counts = Counter(plain)
    names = [
        name if counts[name] == 1 else _suffixed(name, method, path, SUFFIX_DIGITS)
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
    return f"{name}_{digest}"


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
    expander: Expander,
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
        tool=tool,  # its schemas shared with other tools (read-only), as the module's docstring says
        body_media_type=body.read.media_type if body.read else None,
        security=security,
        tags=entry.tags,
        body_kind=body.read.kind if body.read else "json",
        body_encodings=body.read.encodings if body.read else {},
    )


def _parameters(entry: _Found, *, expander: Expander, arguments: _Arguments) -> tuple[Parameter, ...]:
    spec = expander.spec
    written: dict[tuple[str, str], tuple[Mapping[str, Any], str]] = {}
    for source, base in ((entry.item, entry.item_base), (entry.operation, entry.base)):
        listed = source.get("parameters") or []
        if is_reference(listed):
            listed, base = spec.resolve(listed, base)
        if not isinstance(listed, list):
            raise SpecError(f"the parameters of {entry.method} {entry.path} are not a list")
        for index, node in enumerate(listed):
            parameter, parameter_base = mapping_of(spec, node, base, f"parameter {index}")
            name, where = parameter.get("name"), parameter.get("in")
            if not isinstance(name, str) or where not in LOCATION_ORDER:
                raise SpecError(f"parameter {index} of {entry.method} {entry.path} has no name or place")
            written[(name, where)] = (parameter, parameter_base)
    placed: list[Parameter] = []
    for location in LOCATION_ORDER:
        for (name, where), (parameter, base) in written.items():
            if where != location or (location == "header" and name.lower() in IGNORED_HEADERS):
                continue
            placed.append(_parameter(parameter, base=base, expander=expander, arguments=arguments))
    return tuple(placed)


def _parameter(
    parameter: Mapping[str, Any], *, base: str, expander: Expander, arguments: _Arguments
) -> Parameter:
    name, location = parameter["name"], parameter["in"]
    content_type = None
    if "schema" in parameter:
        schema = expander.schema(parameter["schema"], base)
    elif isinstance(parameter.get("content"), Mapping) and parameter["content"]:
        content, content_base = expander.spec.resolve(parameter["content"], base)
        content_type, media = next(iter(content.items()))
        media, media_base = mapping_of(
            expander.spec, media, content_base, f"the {content_type} of parameter {name}"
        )
        schema = expander.schema(media.get("schema", {}), media_base)
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
    """The request body as the tool takes it: its flattened arguments (argument → property) or
    its one argument."""

    read: Body | None = None
    arguments: Mapping[str, str] | None = None
    argument: str | None = None

    @property
    def required(self) -> bool:
        return self.read is not None and self.read.required


def _json_media(content: Mapping[str, Any]) -> str | None:
    """The JSON media type among a content map's keys: application/json, any +json, */*."""
    kinds = {media.split(";")[0].strip().lower(): media for media in content}
    if "application/json" in kinds:
        return kinds["application/json"]
    for kind, media in kinds.items():
        if kind.endswith("+json"):
            return media
    return kinds.get("*/*")


def _body(entry: _Found, *, expander: Expander, arguments: _Arguments) -> _Body:
    if "requestBody" not in entry.operation:
        return _Body()
    body = read_body(entry.operation["requestBody"], entry.base, expander)
    if body is None:
        return _Body()
    if body.fields is not None:
        flat: dict[str, str] = {}
        for body_field in body.fields:
            argument = arguments.claim(body_field.name, "body")
            arguments.add(argument, body_field.schema, required=body_field.required)
            flat[argument] = body_field.name
        return _Body(body, arguments=flat)
    argument = arguments.claim("body", "body")
    arguments.add(argument, body.whole, required=body.required)
    return _Body(body, argument=argument)


def _output_schema(entry: _Found, *, expander: Expander) -> dict[str, Any] | None:
    spec = expander.spec
    responses, responses_base = mapping_of(
        spec,
        entry.operation.get("responses") or {},
        entry.base,
        f"the responses of {entry.method} {entry.path}",
    )
    statuses = sorted(s for s in responses if re.fullmatch(r"2\d\d", s)) + [
        s for s in responses if s.upper() == "2XX"
    ]
    for status in statuses:
        response, base = mapping_of(spec, responses[status], responses_base, f"response {status}")
        content, base = spec.resolve(response.get("content"), base)
        if not isinstance(content, Mapping) or not content:
            continue
        media = _json_media(content)
        if media is None:
            return None
        described, media_base = mapping_of(spec, content[media], base, f"the {media} of response {status}")
        if "schema" not in described:
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
