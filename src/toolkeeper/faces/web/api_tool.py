"""The JSON API of one tool, `/api/tools/{name}` (its exposed name): what the model sees of it,
its hints and pins, notes, argument rules, confirm mode, and the policy's explanation of a call.

Each route parses its input and calls a service; the services validate. A stale `version` (the
pins or rules changed since the caller read them) is refused with 409 and nothing is written.
`tool_info` is also what the tool page shows.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.annotations.effective import GLOBAL
from toolkeeper.annotations.hints import HINTS
from toolkeeper.catalog import CatalogTool
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.faces.web.face import JsonResponse, WebFace, face_of, json_object


def find_tool(face: WebFace, name: str) -> CatalogTool:
    """The catalog's tool of this exposed name (or namespacedName), or a 404."""
    catalog = face.gateway.catalog
    tool = catalog.by_exposed.get(name) or catalog.by_namespaced.get(name)
    if tool is None:
        raise ServiceError(
            f"There is no tool {name!r}: see the tools page for the tools the servers offer.",
            ErrorKind.NOT_FOUND,
        )
    return tool


async def tool_info(face: WebFace, tool: CatalogTool, scope: str | None = None) -> dict[str, Any]:
    """Everything the tool page shows: the entry clients are listed, the hints with what each
    would inherit, the notes, rules and confirm modes. `scope` names a toolset: the hints as
    they are while it is equipped, and its pins (None: the global ones)."""
    gateway, services = face.gateway, face.services
    entry, listed = gateway.views.as_listed(tool)
    explained = await services.hints.explain(tool.namespaced_name, scope)
    fields = explained["fields"]
    pins = (await services.hints.overrides()).pins(tool.namespaced_name, scope or GLOBAL).fields
    modes = (await services.policy.confirm_modes())["modes"]
    toolset = gateway.toolset
    return {
        "name": tool.exposed_name,
        "namespacedName": tool.namespaced_name,
        "server": tool.server,
        "available": tool.available,
        "listed": listed,
        "whyNotListed": None if listed else gateway.why_hidden(tool.exposed_name),
        "listing": entry,
        "hints": {
            "version": await services.hints.version(tool.namespaced_name),
            "fields": fields,
            "scope": scope,
            "pinned": dict(pins),
            "inherited": await services.hints.inherited(tool.namespaced_name, scope),
            "parameters": explained["parameters"],
            "trust": explained["trust"],
            "inferHints": explained["inferHints"],
            "badges": {
                name: {"value": fields[name]["value"], "source": fields[name]["source"]} for name in HINTS
            },
        },
        "notes": {
            "toolset": toolset.name if toolset else None,
            "inToolset": bool(toolset and toolset.contains(tool)),
            "notes": [{"name": n.name, "note": n.note} for n in toolset.notes_for(tool)] if toolset else [],
        },
        "rules": await services.rules.list(tool.namespaced_name),
        "confirmModes": [m for m in modes if m["tool"] == tool.namespaced_name],
    }


# -- parsing ----------------------------------------------------------------------------------


def optional_text(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ServiceError(f"{what} must be a text, got {value!r}.")


def _tool(request: Request) -> tuple[WebFace, CatalogTool]:
    face = face_of(request)
    return face, find_tool(face, request.path_params["name"])


def _number(raw: str | None, what: str) -> int:
    if raw is None or not raw.strip().isdigit():
        raise ServiceError(f"{what} is a whole number, got {raw!r}.")
    return int(raw)


# -- routes -------------------------------------------------------------------------------------


async def get_tool(request: Request) -> Response:
    """One tool: as the model sees it, its hints, notes, rules and confirm modes.
    ---
    summary: One tool with everything the tool page shows
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}, description: the exposed tool name}
      - name: scope
        in: query
        required: false
        schema: {type: string}
        description: a toolset, for its pins and the hints while it is equipped
    responses:
      200:
        description: >-
          listing (the tools/list entry clients get now, notes included), listed, hints (fields,
          scope, pinned, inherited, version), notes, rules, confirmModes
      404: {description: no such tool or toolset}
    """
    face, tool = _tool(request)
    return JsonResponse(await tool_info(face, tool, request.query_params.get("scope") or None))


async def put_hints(request: Request) -> Response:
    """Pin hints (a null value unpins that field) or accept suggestions.
    ---
    summary: Pin or unpin a tool's hints, or accept inferred suggestions
    requestBody:
      content:
        application/json:
          schema:
            type: object
            properties:
              hints: {type: object, description: 'field to true/false (title: text); null unpins'}
              parameters: {type: object, description: parameter name to its description}
              accept:
                {type: array, items: {type: string}, description: 'fields whose suggestion to pin, or [all]'}
              toolset: {type: string, description: pin for this toolset only (default global)}
              version:
                {type: string, description: hints.version as read; 409 if the pins changed since}
    responses:
      200: {description: "what was pinned and cleared, and the tool's hints now"}
      404: {description: no such tool or toolset}
      409: {description: the pins changed since `version` was read}
      422: {description: an unknown field or a value of the wrong type}
    """
    face, tool = _tool(request)
    body = await json_object(request)
    result = await face.services.hints.set(
        tool.namespaced_name,
        body.get("hints"),
        body.get("parameters"),
        optional_text(body.get("toolset"), "toolset"),
        body.get("accept"),
        by_person=True,
        version=optional_text(body.get("version"), "version"),
    )
    return JsonResponse(result)


async def delete_hints(request: Request) -> Response:
    """Unpin fields so the tool inherits them again.
    ---
    summary: Unpin a tool's hints
    parameters:
      - name: field
        in: query
        schema: {type: array, items: {type: string}}
        description: fields to unpin (all when none)
      - {name: toolset, in: query, schema: {type: string}}
      - {name: version, in: query, schema: {type: string}}
    responses:
      200: {description: the fields cleared}
      404: {description: no such tool}
      409: {description: the pins changed since `version` was read}
      422: {description: an unknown field}
    """
    face, tool = _tool(request)
    query = request.query_params
    result = await face.services.hints.clear(
        tool.namespaced_name,
        query.getlist("field") or None,
        query.get("toolset"),
        by_person=True,
        version=query.get("version"),
    )
    return JsonResponse(result)


async def get_notes(request: Request) -> Response:
    """The tool's notes in the equipped toolset.
    ---
    summary: A tool's notes
    responses:
      200: {description: "toolset, inToolset, notes: [{name, note}]"}
      404: {description: no such tool}
    """
    face, tool = _tool(request)
    return JsonResponse((await tool_info(face, tool))["notes"])


async def post_notes(request: Request) -> Response:
    """Add notes to the tool, in the equipped toolset (or the one named).
    ---
    summary: Add notes to a tool
    requestBody:
      content:
        application/json:
          schema:
            type: object
            required: [notes]
            properties:
              notes:
                type: array
                items: {type: object, properties: {name: {type: string}, note: {type: string}}}
              toolset: {type: string}
    responses:
      200: {description: the notes added and skipped}
      404: {description: "no such tool, no toolset equipped, or the tool is not in the toolset"}
      422: {description: a note without a name or text}
    """
    face, tool = _tool(request)
    body = await json_object(request)
    toolset = optional_text(body.get("toolset"), "toolset")
    return JsonResponse(
        await face.services.toolsets.add_notes(tool.namespaced_name, body.get("notes"), toolset)
    )


async def delete_notes(request: Request) -> Response:
    """Remove notes from the tool by name.
    ---
    summary: Remove a tool's notes
    parameters:
      - {name: name, in: query, required: true, schema: {type: array, items: {type: string}}}
      - {name: toolset, in: query, schema: {type: string}}
    responses:
      200: {description: the notes removed}
      404: {description: no such tool or note}
      422: {description: no note named}
    """
    face, tool = _tool(request)
    query = request.query_params
    names = query.getlist("name")
    result = await face.services.toolsets.remove_notes(tool.namespaced_name, names, query.get("toolset"))
    return JsonResponse(result)


async def get_rules(request: Request) -> Response:
    """The tool's argument rules, in the order they are tried.
    ---
    summary: A tool's argument rules
    responses:
      200: {description: "rules (number, when, hints, text) and their version"}
      404: {description: no such tool}
    """
    face, tool = _tool(request)
    return JsonResponse(await face.services.rules.list(tool.namespaced_name))


async def post_rule(request: Request) -> Response:
    """Add an argument rule after the tool's others.
    ---
    summary: Add an argument rule
    requestBody:
      content:
        application/json:
          schema:
            type: object
            required: [rule]
            properties: {rule: {type: object, description: '{"when": {...}, "hints": {...}}'}}
    responses:
      200: {description: the tool's rules now}
      404: {description: no such tool}
      422: {description: the rule is malformed}
    """
    face, tool = _tool(request)
    body = await json_object(request)
    return JsonResponse(await face.services.rules.add(tool.namespaced_name, body.get("rule"), by_person=True))


async def put_rules(request: Request) -> Response:
    """Replace the tool's whole ordered list of rules (to reorder them, or empty to remove all).
    ---
    summary: Replace a tool's argument rules
    requestBody:
      content:
        application/json:
          schema:
            type: object
            required: [rules]
            properties:
              rules: {type: array, items: {type: object}}
              version: {type: string, description: the listing's version; 409 if the rules changed since}
    responses:
      200: {description: the tool's rules now}
      404: {description: no such tool}
      409: {description: the rules changed since `version` was read}
      422: {description: a rule is malformed}
    """
    face, tool = _tool(request)
    body = await json_object(request)
    version = optional_text(body.get("version"), "version")
    result = await face.services.rules.replace(
        tool.namespaced_name, body.get("rules"), by_person=True, version=version
    )
    return JsonResponse(result)


async def delete_rule(request: Request) -> Response:
    """Remove one rule by its number.
    ---
    summary: Remove an argument rule
    parameters:
      - {name: number, in: query, required: true, schema: {type: integer}}
      - {name: version, in: query, schema: {type: string}}
    responses:
      200: {description: the tool's rules now}
      404: {description: no such tool or rule}
      409: {description: the rules changed since `version` was read}
      422: {description: the number is missing or not a number}
    """
    face, tool = _tool(request)
    query = request.query_params
    number = _number(query.get("number"), "number")
    result = await face.services.rules.remove(tool.namespaced_name, number, version=query.get("version"))
    return JsonResponse(result)


async def test_rules(request: Request) -> Response:
    """The hints a call with these arguments resolves to, and their source.
    ---
    summary: Test a tool's argument rules
    requestBody:
      content:
        application/json:
          schema: {type: object, properties: {arguments: {type: object}}}
    responses:
      200: {description: "the resolution: hints, source, detail"}
      404: {description: no such tool}
      422: {description: the arguments cannot be resolved}
    """
    face, tool = _tool(request)
    body = await json_object(request)
    return JsonResponse(await face.services.rules.test(tool.namespaced_name, body.get("arguments", {})))


async def put_confirm(request: Request) -> Response:
    """Set how the tool's calls are confirmed.
    ---
    summary: Set a tool's confirm mode
    requestBody:
      content:
        application/json:
          schema:
            type: object
            required: [mode]
            properties:
              mode: {type: string, enum: [always, session, never, deny]}
              text: {type: string, description: what the person reads when asked}
              toolset: {type: string, description: only while this toolset lists the tool}
    responses:
      200: {description: the mode set and the one before}
      404: {description: no such tool or toolset}
      422: {description: an unknown mode or a text too long}
    """
    face, tool = _tool(request)
    body = await json_object(request)
    result = await face.services.policy.set_confirm_mode(
        tool.namespaced_name,
        body.get("mode"),
        body.get("text"),
        optional_text(body.get("toolset"), "toolset"),
        by_person=True,
    )
    return JsonResponse(result)


async def delete_confirm(request: Request) -> Response:
    """Remove the tool's confirm mode; the next one in line holds again.
    ---
    summary: Clear a tool's confirm mode
    parameters:
      - {name: toolset, in: query, schema: {type: string}}
    responses:
      200: {description: the mode in force now}
      404: {description: "no such tool, or it has no mode there"}
    """
    face, tool = _tool(request)
    toolset = request.query_params.get("toolset")
    return JsonResponse(
        await face.services.policy.clear_confirm_mode(tool.namespaced_name, toolset, by_person=True)
    )


async def explain(request: Request) -> Response:
    """What the policy decides for a call with these arguments, and why (nothing is called).
    ---
    summary: Explain the policy's decision for a call
    requestBody:
      content:
        application/json:
          schema: {type: object, properties: {arguments: {type: object}}}
    responses:
      200: {description: "decision, madeBy, reason, hints with sources, confirmMode, resolution"}
      404: {description: no such tool}
      422: {description: the arguments are not an object}
    """
    face, tool = _tool(request)
    body = await json_object(request)
    return JsonResponse(await face.services.policy.explain(tool.namespaced_name, body.get("arguments")))


ROUTES: list[BaseRoute] = [
    Route("/tools/{name}", get_tool, methods=["GET"]),
    Route("/tools/{name}/hints", put_hints, methods=["PUT"]),
    Route("/tools/{name}/hints", delete_hints, methods=["DELETE"]),
    Route("/tools/{name}/notes", get_notes, methods=["GET"]),
    Route("/tools/{name}/notes", post_notes, methods=["POST"]),
    Route("/tools/{name}/notes", delete_notes, methods=["DELETE"]),
    Route("/tools/{name}/rules", get_rules, methods=["GET"]),
    Route("/tools/{name}/rules", post_rule, methods=["POST"]),
    Route("/tools/{name}/rules", put_rules, methods=["PUT"]),
    Route("/tools/{name}/rules", delete_rule, methods=["DELETE"]),
    Route("/tools/{name}/rules/test", test_rules, methods=["POST"]),
    Route("/tools/{name}/confirm", put_confirm, methods=["PUT"]),
    Route("/tools/{name}/confirm", delete_confirm, methods=["DELETE"]),
    Route("/tools/{name}/explain", explain, methods=["POST"]),
]
