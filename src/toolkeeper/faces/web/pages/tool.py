"""The tool page, `/tools/{name}`: one tool as the model sees it (description with notes,
badges, input schema), and everything a person can change about it: pinned hints (with what each
would inherit, and suggestions to accept), notes, argument rules (tested in a JSON box), the
confirm mode, and the policy's explanation of a call.

Every form posts with its CSRF token, is checked by the services, and answers with a 303 back to
the page and a notice; a refusal re-renders the page with the message beside the form (and the
status of its kind). The hint editor and the rules' reorder and remove carry the version of what
they were made from, so a form made before someone else's change says so instead of writing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from toolkeeper.annotations.effective import GLOBAL
from toolkeeper.annotations.hints import HINTS
from toolkeeper.catalog import CatalogTool
from toolkeeper.errors import ErrorKind, ServiceError, http_status
from toolkeeper.faces.web.api_tool import find_tool, tool_info
from toolkeeper.faces.web.face import WebFace, face_of, parse_json, render
from toolkeeper.policy.model import ConfirmMode
from toolkeeper.services.hints import STALE

# The notices a redirect may name (a fixed set: the address cannot put words on the page).
NOTICES = {
    "hints": "Hints saved.",
    "unchanged": "Nothing to change: the hints were already so.",
    "accepted": "Suggestion accepted and pinned.",
    "note-added": "Note added.",
    "note-removed": "Note removed.",
    "rule-added": "Rule added.",
    "rule-removed": "Rule removed.",
    "rule-moved": "Rule moved.",
    "confirm-set": "Confirm mode set.",
    "confirm-cleared": "Confirm mode cleared.",
}
CHOICES = ("inherit", "true", "false")
SCHEMA_DEPTH = 4  # nested objects past this are shown as JSON


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _page_url(tool: CatalogTool) -> str:
    return "/tools/" + quote(tool.exposed_name, safe="")


def _done(tool: CatalogTool, notice: str, scope: str | None = None) -> Response:
    kept = f"&scope={quote(scope, safe='')}" if scope else ""
    return RedirectResponse(f"{_page_url(tool)}?done={notice}{kept}", status_code=303)


def _scope(given: str | None) -> str | None:
    """The toolset whose pins and confirm mode the page edits (a page address's or a form's
    `scope`); None: the global ones. The services refuse a toolset that does not exist."""
    return (given or "").strip() or None


def _tool(request: Request) -> tuple[WebFace, CatalogTool]:
    face = face_of(request)
    return face, find_tool(face, request.path_params["name"])


async def _page(
    request: Request,
    face: WebFace,
    tool: CatalogTool,
    *,
    errors: Mapping[str, str] | None = None,
    values: Mapping[str, str] | None = None,
    results: Mapping[str, Any] | None = None,
    status: int = 200,
    scope: str | None = None,
) -> Response:
    info = await tool_info(face, tool, scope)
    no_arguments: dict[str, Any] | None = None
    no_arguments_refused = None
    try:
        no_arguments = await face.services.policy.explain(tool.namespaced_name, {})
    except ServiceError as exc:  # e.g. a call with no arguments does not match the input schema
        no_arguments_refused = str(exc)
    context = {
        "tool": info,
        "url": _page_url(tool),
        "schema_rows": schema_rows(info["listing"].get("inputSchema")),
        "no_arguments": no_arguments,
        "no_arguments_refused": no_arguments_refused,
        "modes": [m.value for m in ConfirmMode],
        "scope": scope,
        "scopes": await face.services.toolsets.names(),
        "choices": CHOICES,
        "hint_names": HINTS,
        "notice": NOTICES.get(request.query_params.get("done", "")),
        "errors": errors or {},
        "values": values or {},
        "results": results or {},
    }
    return render(request, "tool.html", context, status_code=status)


async def _refused(
    request: Request, face: WebFace, tool: CatalogTool, where: str, error: ServiceError, form: FormData
) -> Response:
    """The page again, with the service's message beside the form that was sent, and what was typed."""
    values = {key: value for key, value in form.items() if isinstance(value, str) and key != "csrf"}
    scope = _scope(_field(form, "scope"))
    try:
        return await _page(
            request,
            face,
            tool,
            errors={where: str(error)},
            values=values,
            status=http_status(error.kind),
            scope=scope,
        )
    except ServiceError:  # the scope itself is what was refused: the page as it is globally
        return await _page(
            request, face, tool, errors={where: str(error)}, values=values, status=http_status(error.kind)
        )


# -- the page ---------------------------------------------------------------------------------


async def show(request: Request) -> Response:
    face, tool = _tool(request)
    return await _page(request, face, tool, scope=_scope(request.query_params.get("scope")))


def hint_changes(form: FormData, pinned: Mapping[str, Any]) -> dict[str, Any]:
    """What the editor asks to change against the tool's pins: a value to pin, None to
    unpin. A hint left as it is pinned (or left inheriting) is not named. `pinned`: the pins of
    the scope the form edits."""
    changes: dict[str, Any] = {}
    for hint in HINTS:
        choice = _field(form, hint) or "inherit"
        if choice not in CHOICES:
            raise ServiceError(f"{hint}: choose inherit, true or false; got {choice!r}.")
        if choice == "inherit":
            if hint in pinned:
                changes[hint] = None
        elif pinned.get(hint) != (choice == "true"):
            changes[hint] = choice == "true"
    title = _field(form, "title").strip()
    if not title and "title" in pinned:
        changes["title"] = None
    elif title and pinned.get("title") != title:
        changes["title"] = title
    return changes


async def save_hints(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    scope = _scope(_field(form, "scope"))
    pinned = (await face.services.hints.overrides()).pins(tool.namespaced_name, scope or GLOBAL).fields
    try:
        changes = hint_changes(form, pinned)
        version = _field(form, "version")
        if changes:
            await face.services.hints.set(
                tool.namespaced_name, changes, toolset=scope, by_person=True, version=version
            )
        elif version != await face.services.hints.version(tool.namespaced_name):
            # Nothing differs from the pins as they are now, but the form was made from others.
            raise ServiceError(STALE, ErrorKind.CONFLICT)
    except ServiceError as exc:
        return await _refused(request, face, tool, "hints", exc, form)
    return _done(tool, "hints" if changes else "unchanged", scope)


async def accept_suggestion(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    scope = _scope(_field(form, "scope"))
    try:
        await face.services.hints.set(
            tool.namespaced_name,
            toolset=scope,
            accept=[_field(form, "accept")],
            by_person=True,
            version=_field(form, "version"),
        )
    except ServiceError as exc:
        return await _refused(request, face, tool, "hints", exc, form)
    return _done(tool, "accepted", scope)


async def add_note(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    note = {"name": _field(form, "name").strip(), "note": _field(form, "note").strip()}
    try:
        await face.services.toolsets.add_notes(tool.namespaced_name, [note])
    except ServiceError as exc:
        return await _refused(request, face, tool, "notes", exc, form)
    return _done(tool, "note-added")


async def remove_note(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    try:
        await face.services.toolsets.remove_notes(tool.namespaced_name, [_field(form, "name")])
    except ServiceError as exc:
        return await _refused(request, face, tool, "notes", exc, form)
    return _done(tool, "note-removed")


async def add_rule(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    try:
        rule = parse_json(_field(form, "rule"), "The rule")
        await face.services.rules.add(tool.namespaced_name, rule, by_person=True)
    except ServiceError as exc:
        return await _refused(request, face, tool, "rules", exc, form)
    return _done(tool, "rule-added")


def _rule_number(form: FormData) -> int:
    raw = _field(form, "number")
    if not raw.isdigit():
        raise ServiceError(f"A rule is named by its number; got {raw!r}.")
    return int(raw)


async def remove_rule(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    try:
        number = _rule_number(form)
        await face.services.rules.remove(tool.namespaced_name, number, version=_field(form, "version"))
    except ServiceError as exc:
        return await _refused(request, face, tool, "rules", exc, form)
    return _done(tool, "rule-removed")


def moved(rules: list[dict[str, Any]], number: int, direction: str) -> list[dict[str, Any]]:
    """The rules (as stored: when and hints) with rule `number` one place up or down."""
    if direction not in ("up", "down"):
        raise ServiceError(f"A rule moves up or down; got {direction!r}.")
    index = number - 1
    other = index - 1 if direction == "up" else index + 1
    if not (0 <= index < len(rules) and 0 <= other < len(rules)):
        raise ServiceError(f"Rule {number} cannot move {direction}.")
    order = [{"when": r["when"], "hints": r["hints"]} for r in rules]
    order[index], order[other] = order[other], order[index]
    return order


async def move_rule(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    try:
        listing = await face.services.rules.list(tool.namespaced_name)
        order = moved(listing["rules"], _rule_number(form), _field(form, "direction"))
        await face.services.rules.replace(
            tool.namespaced_name, order, by_person=True, version=_field(form, "version")
        )
    except ServiceError as exc:
        return await _refused(request, face, tool, "rules", exc, form)
    return _done(tool, "rule-moved")


async def test_rules(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    try:
        arguments = parse_json(_field(form, "arguments") or "{}", "The arguments")
        tested = await face.services.rules.test(tool.namespaced_name, arguments)
    except ServiceError as exc:
        return await _refused(request, face, tool, "rules-test", exc, form)
    values = {"test-arguments": _field(form, "arguments")}
    return await _page(request, face, tool, values=values, results={"test": tested})


async def set_confirm(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    mode = _field(form, "mode")
    scope = _scope(_field(form, "scope"))
    try:
        if mode:
            text = _field(form, "text").strip() or None
            policy = face.services.policy
            await policy.set_confirm_mode(tool.namespaced_name, mode, text, scope, by_person=True)
        else:
            await face.services.policy.clear_confirm_mode(tool.namespaced_name, scope, by_person=True)
    except ServiceError as exc:
        return await _refused(request, face, tool, "confirm", exc, form)
    return _done(tool, "confirm-set" if mode else "confirm-cleared", scope)


async def explain(request: Request) -> Response:
    face, tool = _tool(request)
    form = await request.form()
    try:
        arguments = parse_json(_field(form, "arguments") or "{}", "The arguments")
        explained = await face.services.policy.explain(tool.namespaced_name, arguments)
    except ServiceError as exc:
        return await _refused(request, face, tool, "explain", exc, form)
    values = {"explain-arguments": _field(form, "arguments")}
    return await _page(request, face, tool, values=values, results={"explain": explained})


# -- the input schema as rows ---------------------------------------------------------------------


def schema_rows(schema: Any, depth: int = 0) -> list[dict[str, Any]]:
    """The schema's properties, one row each, nested objects' properties indented below theirs."""
    if not isinstance(schema, Mapping) or not isinstance(schema.get("properties"), Mapping):
        return []
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    rows: list[dict[str, Any]] = []
    for name, spec in schema["properties"].items():
        spec = spec if isinstance(spec, Mapping) else {}
        nested = _nested(spec)
        rows.append(
            {
                "name": str(name),
                "depth": depth,
                "type": _type_text(spec),
                "required": name in needed,
                "description": spec.get("description") if isinstance(spec.get("description"), str) else None,
                "enum": _json_text(spec["enum"]) if "enum" in spec else None,
                "default": _json_text(spec["default"]) if "default" in spec else None,
                # Deeper than the table indents: the rest of the schema as JSON.
                "json": _json_text(nested) if nested is not None and depth + 1 >= SCHEMA_DEPTH else None,
            }
        )
        if nested is not None and depth + 1 < SCHEMA_DEPTH:
            rows.extend(schema_rows(nested, depth + 1))
    return rows


def _nested(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object schema a property holds (itself, or its array's items), if it has properties."""
    items = spec.get("items")
    for candidate in (spec, items):
        if isinstance(candidate, Mapping) and isinstance(candidate.get("properties"), Mapping):
            return candidate
    return None


def _type_text(spec: Mapping[str, Any]) -> str:
    kind = spec.get("type")
    if isinstance(kind, list):
        text = " | ".join(str(k) for k in kind)
    elif isinstance(kind, str):
        text = kind
    elif "$ref" in spec:
        text = str(spec["$ref"])
    else:
        text = next((key for key in ("anyOf", "oneOf", "allOf", "const") if key in spec), "any")
    items = spec.get("items")
    if text == "array" and isinstance(items, Mapping) and isinstance(items.get("type"), str):
        text = f"array of {items['type']}"
    return text


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _route(path: str, endpoint: Any) -> Route:
    return Route("/tools/{name}" + path, endpoint, methods=["POST"])


ROUTES: list[BaseRoute] = [
    Route("/tools/{name}", show, methods=["GET"], name="tool"),
    _route("/hints", save_hints),
    _route("/hints/accept", accept_suggestion),
    _route("/notes", add_note),
    _route("/notes/remove", remove_note),
    _route("/rules", add_rule),
    _route("/rules/remove", remove_rule),
    _route("/rules/move", move_rule),
    _route("/rules/test", test_rules),
    _route("/confirm", set_confirm),
    _route("/explain", explain),
]
