"""An operation's request body: which of its media types is sent, and how a tool's arguments give it.

Media types, in this order of preference when a body offers several: JSON (`application/json`,
then any `…+json`), `application/x-www-form-urlencoded`, `multipart/form-data`, `text/plain`,
`application/octet-stream`, and last `*/*` (sent as JSON); one that cannot say the body (a
form whose schema is not an object of fields) gives way to the next. A body offered only in
other types (XML, images, …) cannot be sent: its operation is skipped, with its media types in
the reason.

JSON, form and multipart bodies are flattened into the tool's arguments when their schema is an
object with `properties` and nothing that a flat list cannot say (no `allOf`/`oneOf`/`anyOf`/
`not`/`if` at its top, no `additionalProperties` allowed): each property is an argument, its
`readOnly` ones left out, as a client must not send them. Any other body of these kinds is one
argument, `body`. An optional form body with no properties (as Stripe declares even on its
GETs) gives no argument and sends nothing.

How each is given, as the arguments' descriptions say:
- JSON: as JSON values.
- form (`application/x-www-form-urlencoded`): each field as a JSON value, sent as the spec's
  `encoding` says for it (`style`, `explode`, `contentType`; by default `form`, exploded):
  `deepObject` nests in brackets, lists by index (`metadata[key]=v`, `items[0][price]=p`).
- multipart (`multipart/form-data`): text fields as values; objects as a JSON part (or, with
  `style: deepObject`, as bracketed text parts, as Stripe reads them); a list as one part per
  item; a file field (`format: binary`, or a `contentEncoding` or
  `contentMediaType`, or an `encoding` `contentType` that is not text) as an object
  `{"filename", "contentType", "base64"}`, its bytes in base64 (a local path is never read).
- `text/plain`: the body as a string argument, `body`.
- `application/octet-stream`: the body's bytes, base64-encoded, as a string argument, `body`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from toolkeeper.downstreams.openapi.schemas import Expander, is_reference
from toolkeeper.downstreams.openapi.spec import SpecError

BodyKind = Literal["json", "form", "multipart", "text", "binary"]
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
_BY_PREFERENCE: tuple[tuple[str, BodyKind], ...] = (
    (FORM, "form"),
    (MULTIPART, "multipart"),
    ("text/plain", "text"),
    ("application/octet-stream", "binary"),
)
_NOT_FLAT = ("allOf", "oneOf", "anyOf", "not", "if")
_FILE_NOTE = (
    "A file, given by its content: an object with `base64` (the file's bytes, base64-encoded) and "
    "optionally `filename` and `contentType`."
)
_FILE_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "filename": {"type": "string"},
        "contentType": {"type": "string"},
        "base64": {"type": "string", "contentEncoding": "base64"},
    },
    "required": ["base64"],
    "additionalProperties": False,
}


class Unsupported(Exception):
    """An operation the converter cannot express: the message is the reason it is skipped."""


@dataclass(frozen=True)
class FieldEncoding:
    """How one field of a form or multipart body is sent (OpenAPI's Encoding object)."""

    style: str = "form"
    explode: bool = True
    content_type: str | None = None
    file: bool = False  # multipart: given as {"filename", "contentType", "base64"}


@dataclass(frozen=True)
class BodyField:
    """One property of a flattened body, as an argument."""

    name: str
    schema: Any
    required: bool


@dataclass(frozen=True)
class Body:
    """A request body as the tool takes it: flattened `fields`, or one `whole` argument."""

    kind: BodyKind
    media_type: str
    required: bool
    fields: tuple[BodyField, ...] | None = None
    whole: Any = None
    encodings: Mapping[str, FieldEncoding] = field(default_factory=dict)


def media_types_to_try(content: Mapping[str, Any]) -> list[tuple[str, BodyKind]]:
    """The media types a body may be sent as, by the order in the module's docstring."""
    kinds = {media.split(";")[0].strip().lower(): media for media in content}
    found: list[tuple[str, BodyKind]] = []
    if "application/json" in kinds:
        found.append((kinds["application/json"], "json"))
    found.extend((media, "json") for kind, media in kinds.items() if kind.endswith("+json"))
    found.extend((kinds[wanted], kind) for wanted, kind in _BY_PREFERENCE if wanted in kinds)
    if "*/*" in kinds:
        found.append((kinds["*/*"], "json"))
    return found


def read_body(written: Any, base: str, expander: Expander) -> Body | None:
    """The operation's request body (its `requestBody`, resolved), or None when it has none: in
    the first media type, by preference, that can say it."""
    spec = expander.spec
    body, base = spec.resolve(written, base)
    if not isinstance(body, Mapping):
        through = f" (through $ref {written['$ref']})" if is_reference(written) else ""
        raise SpecError(f"its requestBody{through} is a {type(body).__name__}, not an object")
    content, base = spec.resolve(body.get("content") or {}, base)
    if not isinstance(content, Mapping) or not content:
        return None
    candidates = media_types_to_try(content)
    if not candidates:
        raise Unsupported(
            f"request body only as {', '.join(content)}, which toolkeeper does not send "
            "(JSON, forms, multipart, text/plain and application/octet-stream only)"
        )
    problems: list[str] = []
    for media, kind in candidates:
        try:
            return _body_as(body, content[media], base, media=media, kind=kind, expander=expander)
        except Unsupported as exc:
            problems.append(str(exc))
    raise Unsupported("; ".join(problems))


def _body_as(
    body: Mapping[str, Any], written: Any, base: str, *, media: str, kind: BodyKind, expander: Expander
) -> Body:
    required = body.get("required") is True
    described, media_base = expander.spec.resolve(written, base)
    described = described if isinstance(described, Mapping) else {}
    schema = expander.schema(described.get("schema", {}), media_base)
    description = body.get("description") if isinstance(body.get("description"), str) else None
    if kind == "text":
        return Body(kind, media, required, whole=_text_argument(schema, description, media))
    if kind == "binary":
        return Body(kind, media, required, whole=_binary_argument(description, media))
    encodings = _encodings(described.get("encoding"), schema, kind)
    if flattens(schema):
        wanted = schema.get("required", [])
        fields = tuple(
            BodyField(prop, _shown(prop_schema, encodings.get(prop)), required and prop in wanted)
            for prop, prop_schema in schema["properties"].items()
            if not (isinstance(prop_schema, Mapping) and prop_schema.get("readOnly") is True)
        )
        return Body(kind, media, required, fields=fields, encodings=encodings)
    if kind in ("form", "multipart") and not _may_be_object(schema):
        raise Unsupported(f"its {media} body is not an object of fields")
    shown = dict(schema) if isinstance(schema, Mapping) else {}
    if description is not None and "description" not in shown:
        shown["description"] = description
    if kind != "json":
        note = f"The request body's fields, sent as {media}."
        shown["description"] = f"{shown['description']} {note}" if "description" in shown else note
    return Body(kind, media, required, whole=shown, encodings=encodings)


def flattens(schema: Any) -> bool:
    return (
        isinstance(schema, Mapping)
        and schema.get("type", "object") == "object"
        and isinstance(schema.get("properties"), Mapping)
        and not any(keyword in schema for keyword in _NOT_FLAT)
        and schema.get("additionalProperties", False) is False
    )


def _may_be_object(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return schema is True
    kind = schema.get("type", "object")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _text_argument(schema: Any, description: str | None, media: str) -> dict[str, Any]:
    shown = (
        dict(schema) if isinstance(schema, Mapping) and schema.get("type") == "string" else {"type": "string"}
    )
    note = f"The request body, sent as {media}."
    written = description or shown.get("description")
    shown["description"] = f"{written} {note}" if written else note
    return shown


def _binary_argument(description: str | None, media: str) -> dict[str, Any]:
    note = f"The request body's bytes, base64-encoded (sent decoded, as {media})."
    return {
        "type": "string",
        "contentEncoding": "base64",
        "description": f"{description} {note}" if description else note,
    }


def _encodings(written: Any, schema: Any, kind: BodyKind) -> dict[str, FieldEncoding]:
    """Each field's encoding: as the spec's `encoding` map says, and (multipart) which are files."""
    if kind not in ("form", "multipart"):
        return {}
    written = written if isinstance(written, Mapping) else {}
    properties = _properties_of(schema)
    encodings: dict[str, FieldEncoding] = {}
    for name in {*properties, *written}:
        entry = written.get(name)
        entry = entry if isinstance(entry, Mapping) else {}
        written_style = entry.get("style")
        style = written_style if isinstance(written_style, str) else "form"
        explode = entry.get("explode")
        content_type = entry.get("contentType") if isinstance(entry.get("contentType"), str) else None
        is_file = kind == "multipart" and _is_file(properties.get(name), content_type)
        encodings[name] = FieldEncoding(
            style=style,
            explode=explode if isinstance(explode, bool) else style == "form",
            content_type=content_type,
            file=is_file,
        )
    return encodings


def _properties_of(schema: Any) -> dict[str, Any]:
    """The properties a body's schema names at its top (and in its `allOf` members)."""
    if not isinstance(schema, Mapping):
        return {}
    found: dict[str, Any] = {}
    for member in schema.get("allOf", ()) if isinstance(schema.get("allOf"), list) else ():
        found.update(_properties_of(member))
    if isinstance(schema.get("properties"), Mapping):
        found.update(schema["properties"])
    return found


def _is_file(schema: Any, content_type: str | None) -> bool:
    if isinstance(schema, Mapping) and schema.get("type") == "array":
        return _is_file(schema.get("items"), content_type)
    if isinstance(schema, Mapping) and (
        schema.get("format") == "binary" or "contentMediaType" in schema or "contentEncoding" in schema
    ):
        return True
    if content_type is None:
        return False
    kind = content_type.split(";")[0].strip().lower()
    return not (kind.startswith("text/") or kind == "application/json" or kind.endswith("+json"))


def _shown(schema: Any, encoding: FieldEncoding | None) -> Any:
    """A field's schema as its argument shows it: a file field as the object that gives a file."""
    if encoding is None or not encoding.file:
        return schema
    if isinstance(schema, Mapping) and schema.get("type") == "array":
        return {**schema, "items": _file_argument(schema.get("items"))}
    return _file_argument(schema)


def _file_argument(schema: Any) -> dict[str, Any]:
    written = schema.get("description") if isinstance(schema, Mapping) else None
    description = f"{written} {_FILE_NOTE}" if isinstance(written, str) and written else _FILE_NOTE
    return {**_FILE_SCHEMA, "description": description}
