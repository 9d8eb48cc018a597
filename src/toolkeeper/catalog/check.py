"""The check every tool passes before any client is shown it: what would make a `tools/list` fail.

The SDK validates a whole `tools/list` result against its protocol version's models before it
sends it, and refuses the whole list ("Handler returned an invalid result") when one tool fails;
a client that validates does the same on its side. So one malformed tool would empty the list
of every client. The catalog checks each tool once, as it is listed (under its exposed name),
and the view leaves out a tool that fails, with the reason this module gives.

A listed tool passes when:
- its `name` is text matching `^[A-Za-z0-9_-]{1,64}$` (the exposed names the catalog gives
  always do; the rule is here so the check stands alone);
- its `inputSchema` is a JSON object whose root says `"type": "object"`, and its
  `outputSchema`, when it has one, too (handshake-era clients require both);
- it encodes as JSON with the gateway's own encoder (`jsonwire.dumps`, the raw lanes'), and
  all its text has a UTF-8 form (the SDK's writer refuses a lone UTF-16 surrogate);
- it validates against the `Tool` model of every protocol version the SDK serves (each
  distinct model once). The SDK then dumps what it validated; that dump walks every schema
  (nine tenths of this check's time on a large API, were it done here) and can fail only on a
  value that is not JSON, which the encoding has refused already;
- each schema is valid JSON Schema for the draft its `$schema` names (2020-12 when it names
  none or one jsonschema does not know), by its metaschema as `check_schema` checks it, formats
  aside (see `_metaschema_validator`).

`title` and `annotations` are not checked: the annotator lists only usable values in them
(annotations/effective.py), whatever the server declared. A reason names the field and what
is wrong, for a person to fix the server or the spec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any, get_args

import orjson
from mcp_types import methods
from pydantic import BaseModel, TypeAdapter, ValidationError

from toolkeeper.catalog.identity import EXPOSED_NAME
from toolkeeper.jsonwire import dumps, lone_surrogate_at

# What the annotator rewrites into usable values for every client (see the docstring).
_ANNOTATOR_OWNS = ("title", "annotations")
_SCHEMAS = ("inputSchema", "outputSchema")
_SHOWN = 80  # characters of an offending value quoted in a reason
_TOLD = 200  # characters of a library's message in a reason


def tool_problem(listed: Mapping[str, Any]) -> str | None:
    """Why a client could not be sent this tool (`listed`: its `tools/list` entry), or None."""
    for check in (_name_problem, _root_problem, _encoding_problem, _model_problem, _schema_problem):
        problem = check(listed)
        if problem is not None:
            return problem
    return None


def _name_problem(listed: Mapping[str, Any]) -> str | None:
    name = listed.get("name")
    if not isinstance(name, str) or not EXPOSED_NAME.fullmatch(name):
        return f"name {_quoted(name)} is not 1 to 64 letters, digits, '_' or '-'"
    return None


def _root_problem(listed: Mapping[str, Any]) -> str | None:
    for field in _SCHEMAS:
        if field not in listed or (field == "outputSchema" and listed[field] is None):
            if field == "inputSchema":
                return "inputSchema is missing: every tool takes a JSON Schema object"
            continue
        schema = listed[field]
        if not isinstance(schema, Mapping):
            return f"{field} is {_kind(schema)}, not a JSON Schema object"
        if schema.get("type") != "object":
            written = f'"type": {_quoted(schema["type"])}' if "type" in schema else 'no "type"'
            return f'{field} has {written} at its root; MCP requires "type": "object"'
    return None


def _model_problem(listed: Mapping[str, Any]) -> str | None:
    checked = {k: v for k, v in listed.items() if k not in _ANNOTATOR_OWNS}
    for versions, adapter in _tool_adapters():
        try:
            adapter.validate_python(checked, by_name=False)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = _path(_present(checked, error["loc"])) or "the tool"
            return f"{where}: {error['msg']}, got {_quoted(error['input'])} (protocol {versions})"
    return None


def _schema_problem(listed: Mapping[str, Any]) -> str | None:
    for field in _SCHEMAS:
        schema = listed.get(field)
        if schema is None:
            continue
        if _plainly_valid_2020_12(schema):
            continue
        draft = _draft_of(schema)
        try:
            error = _jsonschema().exceptions.best_match(_metaschema_validator(draft).iter_errors(schema))
        except RecursionError:
            return f"{field} nests too deep to check"
        if error is not None:
            where = _path((field, *error.absolute_path))
            # Of alternatives (`type`: a name or a list of names), the first says it best.
            message = error.context[0].message if error.context else error.message
            return f"{where} is not valid JSON Schema ({_draft_name(draft)}): {_clipped(message, _TOLD)}"
    return None


# The 2020-12 metaschema's rules for the keywords most schemas are made of, checked directly:
# jsonschema takes about 350 µs per schema object to check a schema against the metaschema
# (its `$dynamicRef`s and vocabularies), which is seconds for one large API. `_plainly_valid`
# accepts only schemas the metaschema accepts (tests/test_tool_check.py compares the two on
# real specs); anything it is unsure of, the metaschema itself judges, and names the fault.
_SUBSCHEMA = frozenset(
    "items contains additionalProperties propertyNames if then else not unevaluatedItems "
    "unevaluatedProperties contentSchema".split()
)
_SUBSCHEMA_MAP = frozenset(("properties", "patternProperties", "dependentSchemas", "$defs", "definitions"))
_SUBSCHEMA_LIST = frozenset(("allOf", "anyOf", "oneOf", "prefixItems"))
_TEXT = frozenset(
    "title description $comment format pattern contentEncoding contentMediaType $ref $schema "
    "$dynamicRef $recursiveRef".split()
)
_NUMBER = frozenset(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
_COUNT = frozenset(
    "minLength maxLength minItems maxItems minProperties maxProperties minContains maxContains".split()
)
_FLAG = frozenset(("uniqueItems", "readOnly", "writeOnly", "deprecated"))
_LIST = frozenset(("enum", "examples"))
# Keywords with rules of their own (formats of identifiers, uniqueness, alternatives): the
# metaschema judges a schema that uses them.
_JUDGED = frozenset(("$id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "dependencies"))
_SIMPLE_TYPES = frozenset(("array", "boolean", "integer", "null", "number", "object", "string"))
_DEEPEST = 100


def _plainly_valid(schema: Any, depth: int) -> bool:
    """Whether `schema` is plainly a valid 2020-12 schema (False: not sure; see above)."""
    if schema is True or schema is False:
        return True
    if type(schema) is not dict or depth > _DEEPEST:
        return False
    for key, value in schema.items():
        if key in _SUBSCHEMA:
            plain = _plainly_valid(value, depth + 1)
        elif key in _SUBSCHEMA_MAP:
            plain = type(value) is dict and all(_plainly_valid(v, depth + 1) for v in value.values())
        elif key in _SUBSCHEMA_LIST:
            plain = type(value) is list and bool(value) and all(_plainly_valid(v, depth + 1) for v in value)
        elif key in _TEXT:
            plain = type(value) is str
        elif key in _NUMBER:
            plain = type(value) in (int, float)
        elif key in _COUNT:
            plain = type(value) is int and value >= 0
        elif key in _FLAG:
            plain = type(value) is bool
        elif key in _LIST:
            plain = type(value) is list
        elif key == "type":
            plain = value in _SIMPLE_TYPES if type(value) is str else _type_list(value)
        elif key == "required":
            plain = _names(value)
        elif key == "dependentRequired":
            plain = type(value) is dict and all(_names(v) for v in value.values())
        elif key == "multipleOf":
            plain = type(value) in (int, float) and value > 0
        else:  # `const`, `default`, and keywords the metaschema does not know take any value
            plain = key not in _JUDGED
        if not plain:
            return False
    return True


def _type_list(value: Any) -> bool:
    return (
        type(value) is list
        and bool(value)
        and all(type(v) is str and v in _SIMPLE_TYPES for v in value)
        and len(set(value)) == len(value)
    )


def _names(value: Any) -> bool:
    return type(value) is list and all(type(v) is str for v in value) and len(set(value)) == len(value)


def _encoding_problem(listed: Mapping[str, Any]) -> str | None:
    try:  # what orjson writes, every path can: only a tool it refuses is looked at closer
        orjson.dumps(listed)
        return None
    except TypeError:
        pass
    where = lone_surrogate_at(listed)
    if where is not None:
        # The raw lanes would write it, escaped; the SDK's writer cannot encode it at all.
        return f"{where} holds text with no UTF-8 form (a lone UTF-16 surrogate)"
    try:
        dumps(listed)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"does not encode as JSON: {_clipped(str(exc), _TOLD)}"
    return None


def _present(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The part of a pydantic error location that is in the data: a union's member names
    (`dict[str,any]`, `bool`) follow the last key that is."""
    found: list[Any] = []
    for part in loc:
        inside = isinstance(data, Mapping) and part in data
        if not (inside or (isinstance(data, list) and isinstance(part, int) and part < len(data))):
            break
        data = data[part]
        found.append(part)
    return tuple(found)


def _path(parts: tuple[Any, ...]) -> str:
    """`("inputSchema", "properties", "x", 0)` → `inputSchema.properties.x[0]`."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


@cache
def _tool_adapters() -> tuple[tuple[str, TypeAdapter[Any]], ...]:
    """One adapter per distinct `Tool` model the SDK's `tools/list` results hold, with the
    protocol versions that use it."""
    versions_of: dict[Any, list[str]] = {}
    for (method, version), result in methods.SERVER_RESULTS.items():
        if method == "tools/list" and isinstance(result, type) and issubclass(result, BaseModel):
            (tool_model,) = get_args(result.model_fields["tools"].annotation)  # list[Tool]
            versions_of.setdefault(tool_model, []).append(version)
    return tuple((", ".join(versions), TypeAdapter(model)) for model, versions in versions_of.items())


def _jsonschema() -> Any:
    """jsonschema, imported for the first schema the direct check cannot judge: with the
    packages its format checks load, it is a tenth of a gateway's start-up, and most servers'
    schemas never need it."""
    import jsonschema  # type: ignore[import-untyped]

    return jsonschema


def _plainly_valid_2020_12(schema: Mapping[str, Any]) -> bool:
    """Whether `schema` is of draft 2020-12 and plainly valid in it (see `_plainly_valid`); a
    schema that names no draft is of 2020-12 without asking jsonschema."""
    if isinstance(schema.get("$schema"), str) and _draft_of(schema) is not _jsonschema().Draft202012Validator:
        return False
    return _plainly_valid(schema, 0)


def _draft_of(schema: Mapping[str, Any]) -> Any:
    """The draft `$schema` names; 2020-12 (MCP's default) when it names none jsonschema knows
    (a `$schema` that is not text is itself reported by the 2020-12 metaschema)."""
    jsonschema = _jsonschema()
    if not isinstance(schema.get("$schema"), str):
        return jsonschema.Draft202012Validator
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


@cache
def _metaschema_validator(draft: Any) -> Any:
    """What `check_schema` builds on every call, built once per draft, without its format
    checks: the metaschema's formats are `regex` (which Python's `re` would judge, not
    ECMA-262: a valid `\\p{L}` would fail) and URI forms (checked only where optional packages
    are installed), so a tool would pass on one machine and not on another."""
    return draft(draft.META_SCHEMA)


def _draft_name(draft: Any) -> str:
    """`Draft202012Validator` → "draft 2020-12", `Draft7Validator` → "draft 7"."""
    number = str(draft.__name__).removeprefix("Draft").removesuffix("Validator")
    return f"draft {number[:4]}-{number[4:]}" if len(number) == 6 else f"draft {number}"


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _quoted(value: Any) -> str:
    try:
        text = json.dumps(value, default=repr, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return _clipped(text)


def _clipped(text: str, limit: int = _SHOWN) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
