"""The tools listing and bulk actions as JSON: `GET /api/tools`, `POST /api/tools/bulk`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web.face import JsonResponse, face_of, json_object
from toolkeeper.services.listing import ToolQuery


async def list_tools(request: Request) -> Response:
    """Every tool of the connected servers, filtered and paged.
    ---
    summary: List tools with their effective hints, risk group, confirm mode and policy answer
    parameters:
      - {name: server, in: query, schema: {type: string}, description: only this server's tools}
      - name: q
        in: query
        schema: {type: string}
        description: text in the name, title or description (any case)
      - {name: risk, in: query, schema: {type: string, enum: [safe, modifying, destructive]}}
      - name: view
        in: query
        schema: {type: string, enum: [list, groups]}
        description: >
          groups: safe, then modifying, then destructive; offset and limit apply within each
          group, and pagedOver is the largest group
      - {name: offset, in: query, schema: {type: integer, minimum: 0, default: 0}}
      - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 500, default: 100}}
    responses:
      200:
        description: >
          {"tools": [...], "total", "offset", "limit", "pagedOver", "counts": {safe, modifying,
          destructive}, "servers", "toolset", "costs": {encoding, listed: {tools, tokens}, catalog:
          {tools, tokens}}}. Each tool has exposedName, namespacedName, server, title,
          description, available, inToolset, changed, risk, hints (readOnlyHint, destructiveHint,
          idempotentHint, openWorldHint and title, each {value, source}), tokens (its definition's
          estimated tokens as clients get it now, under costs.encoding), confirmMode and
          withoutArguments (the policy's decision for a call with no arguments).
      422: {description: a filter or paging value is not valid}
      503: {description: the servers have not connected yet}
    """
    params = request.query_params
    query = ToolQuery.parse(
        server=params.get("server"),
        text=params.get("q"),
        risk=params.get("risk"),
        view=params.get("view"),
        offset=params.get("offset"),
        limit=params.get("limit"),
    )
    return JsonResponse(await face_of(request).services.listing.tools(query))


async def bulk(request: Request) -> Response:
    """Act on several tools at once.
    ---
    summary: Add tools to a toolset, set their confirm mode, or pin one hint on each
    requestBody:
      required: true
      content:
        application/json:
          schema:
            type: object
            required: [tools, action]
            properties:
              tools: {type: array, items: {type: string}, description: exposed or namespaced names}
              action: {type: string, enum: [add-to-toolset, confirm, pin]}
              toolset: {type: string, description: "add-to-toolset: an existing toolset"}
              mode: {type: string, enum: [always, session, never, deny, inherit], description: "confirm"}
              hint: {type: string, enum: [readOnlyHint, destructiveHint, idempotentHint, openWorldHint]}
              value: {description: "pin: true, false or 'inherit' (clears the pin)"}
    responses:
      200: {description: '{"action", "done": [tools], "errors": [{tool, kind, message}], "message"}'}
      404: {description: the toolset or every tool was not found}
      409: {description: no tool could be changed (a conflict)}
      422: {description: "the request is not valid, or no tool could be changed"}
    """
    body = await json_object(request)
    options: dict[str, Any] = {k: body[k] for k in ("toolset", "mode", "hint", "value") if k in body}
    services = face_of(request).services
    return JsonResponse(
        await services.listing.bulk(body.get("action"), body.get("tools"), options, by_person=True)
    )


ROUTES: list[BaseRoute] = [
    Route("/tools", list_tools, methods=["GET"]),
    Route("/tools/bulk", bulk, methods=["POST"]),
]
