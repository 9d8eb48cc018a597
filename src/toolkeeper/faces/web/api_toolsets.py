"""Toolsets under `/api/toolsets` and the equipped one under `/api/equipped`, over
`services.toolsets`. A change made here is a person's (`by_person`), as from the CLI."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.errors import ServiceError
from toolkeeper.faces.web.face import JsonResponse, face_of, json_object
from toolkeeper.services.toolsets import status_counts


def flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true", "yes")


async def list_toolsets(request: Request) -> Response:
    """Every saved toolset.
    ---
    summary: List the toolsets
    description: Each toolset with its tools, notes, size (toolCount), whether it is equipped,
      how many of its tools are ok, changed or unavailable (statusCounts), and the estimated
      tokens of the tools it lists, with its notes (tokens; each tool's too).
    responses:
      200: {description: "{toolsets: [...], equipped: name or null, costs: {encoding, listed, catalog}}"}
    """
    saved = await face_of(request).services.toolsets.saved()
    for info in saved["toolsets"]:
        info["statusCounts"] = status_counts(info)
    return JsonResponse(saved)


async def build(request: Request) -> Response:
    """Build a toolset from tools.
    ---
    summary: Build a toolset
    requestBody:
      required: true
      content:
        application/json:
          schema:
            type: object
            required: [name, tools]
            properties:
              name: {type: string, description: "2-50 lowercase letters, digits, hyphens"}
              tools:
                type: array
                items: {oneOf: [{type: string}, {type: object}]}
                description: namespacedName strings, or {namespacedName, refId} objects
              description: {type: string}
              equip: {type: boolean}
    responses:
      201: {description: The toolset was saved}
      409: {description: A toolset of that name exists}
      422: {description: "Bad name, description or tool references"}
      503: {description: The servers have not connected yet}
    """
    body = await json_object(request)
    result = await face_of(request).services.toolsets.build(
        body.get("name"),
        body.get("tools"),
        body.get("description", ""),
        body.get("equip") is True,
        by_person=True,
    )
    return JsonResponse(result, status_code=201)


async def show(request: Request) -> Response:
    """One toolset.
    ---
    summary: Show a toolset
    description: Its tools with their status (ok, changed, unavailable) and estimated tokens,
      its notes, its tokens against the whole catalog's (costs), and its version, which a change
      may send back (expectedVersion) to be refused if the toolset changed meanwhile.
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}}
    responses:
      200: {description: The toolset}
      404: {description: No toolset of that name}
    """
    info = await face_of(request).services.toolsets.show(request.path_params["name"], with_version=True)
    info["statusCounts"] = status_counts(info)
    return JsonResponse(info)


async def replace(request: Request) -> Response:
    """Replace a toolset's tools and description.
    ---
    summary: Edit a toolset
    description: Tools it holds already keep the identity they were stored with (a changed one
      stays changed until repinned); new ones are resolved against the live servers. The notes
      of tools it no longer holds go. With expectedVersion, refused if the toolset changed since.
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}}
    requestBody:
      required: true
      content:
        application/json:
          schema:
            type: object
            required: [tools]
            properties:
              tools: {type: array, items: {oneOf: [{type: string}, {type: object}]}}
              description: {type: string}
              expectedVersion: {type: string}
    responses:
      200: {description: "{toolset, warnings?}"}
      404: {description: No toolset of that name}
      409: {description: The toolset changed since expectedVersion}
      422: {description: Bad description or tool references}
      503: {description: The servers have not connected yet}
    """
    body = await json_object(request)
    result = await face_of(request).services.toolsets.replace(
        request.path_params["name"],
        body.get("tools"),
        body.get("description", ""),
        by_person=True,
        expected_version=body.get("expectedVersion"),
    )
    return JsonResponse(result)


async def delete(request: Request) -> Response:
    """Delete a toolset.
    ---
    summary: Delete a toolset
    description: Deletes it with its notes, hint pins and confirm modes. Only with confirm=true;
      with version, only if the toolset has not changed since.
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}}
      - {name: confirm, in: query, required: true, schema: {type: boolean}}
      - {name: version, in: query, required: false, schema: {type: string}}
    responses:
      200: {description: Deleted}
      404: {description: No toolset of that name}
      409: {description: The toolset changed since that version}
      422: {description: Not confirmed}
    """
    result = await face_of(request).services.toolsets.delete(
        request.path_params["name"],
        confirm=flag(request, "confirm"),
        by_person=True,
        expected_version=request.query_params.get("version"),
    )
    return JsonResponse(result)


async def repin(request: Request) -> Response:
    """Accept the changed tools of a toolset.
    ---
    summary: Repin a toolset
    description: Stores the live identity (refId) of every tool whose schema changed since it
      was added.
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}}
    requestBody:
      required: false
      content:
        application/json:
          schema: {type: object, properties: {expectedVersion: {type: string}}}
    responses:
      200: {description: "{toolset, repinned: [...], warnings?}"}
      404: {description: No toolset of that name}
      409: {description: The toolset changed since expectedVersion}
      503: {description: The servers have not connected yet}
    """
    body = await json_object(request, required=False)
    result = await face_of(request).services.toolsets.repin(
        request.path_params["name"], expected_version=body.get("expectedVersion")
    )
    return JsonResponse(result)


async def export(request: Request) -> Response:
    """Export a toolset as a file.
    ---
    summary: Export a toolset
    description: The toolset with its notes as JSON (format toolkeeper.toolset/1), as a
      download; POST it to /api/toolsets/import to import it.
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}}
    responses:
      200: {description: The exported document}
      404: {description: No toolset of that name}
    """
    name = request.path_params["name"]
    document = await face_of(request).services.toolsets.export(name)
    return JsonResponse(document, headers=download_headers(document["name"]))


def download_headers(name: str) -> dict[str, str]:
    """A toolset's export saved as `<name>.toolset.json` (a toolset's name is plain ASCII)."""
    return {"content-disposition": f'attachment; filename="{name}.toolset.json"'}


async def import_toolset(request: Request) -> Response:
    """Import an exported toolset.
    ---
    summary: Import a toolset
    description: The body is a document from /api/toolsets/{name}/export (or hypertool's
      toolset shape). The toolset becomes a person's.
    parameters:
      - {name: name, in: query, required: false, schema: {type: string}, description: Save under this name}
      - {name: overwrite, in: query, required: false, schema: {type: boolean}}
    requestBody:
      required: true
      content:
        application/json: {schema: {type: object}}
    responses:
      201: {description: "{toolsetName, replaced, toolCount, noteCount, equipped}"}
      409: {description: A toolset of that name exists (and overwrite was not asked)}
      422: {description: Not a toolset document}
    """
    document = await json_object(request)
    result = await face_of(request).services.toolsets.import_toolset(
        document,
        request.query_params.get("name") or None,
        flag(request, "overwrite"),
        by_person=True,
    )
    return JsonResponse(result, status_code=201)


async def equipped(request: Request) -> Response:
    """The equipped toolset.
    ---
    summary: Show the equipped toolset
    responses:
      200: {description: "{equipped, toolset, exposedTools, changedTools, unavailableTools}"}
    """
    return JsonResponse(await face_of(request).services.toolsets.active())


async def equip(request: Request) -> Response:
    """Equip a toolset.
    ---
    summary: Equip a toolset
    description: Clients are offered its tools from now on (they are told the list changed).
    requestBody:
      required: true
      content:
        application/json:
          schema: {type: object, required: [name], properties: {name: {type: string}}}
    responses:
      200: {description: Equipped}
      404: {description: No toolset of that name}
      422: {description: No name given}
    """
    body = await json_object(request)
    name = body.get("name")
    if not isinstance(name, str):
        raise ServiceError('Give the toolset to equip as {"name": ...}.')
    return JsonResponse(await face_of(request).services.toolsets.equip(name))


async def unequip(request: Request) -> Response:
    """Unequip the equipped toolset.
    ---
    summary: Unequip the toolset
    responses:
      200: {description: "{unequipped: name or null, message}"}
    """
    return JsonResponse(await face_of(request).services.toolsets.unequip())


ROUTES: list[BaseRoute] = [
    Route("/toolsets", list_toolsets, methods=["GET"]),
    Route("/toolsets", build, methods=["POST"]),
    # Before /toolsets/{name}: "import" is not a toolset's name here.
    Route("/toolsets/import", import_toolset, methods=["POST"]),
    Route("/toolsets/{name}", show, methods=["GET"]),
    Route("/toolsets/{name}", replace, methods=["PUT"]),
    Route("/toolsets/{name}", delete, methods=["DELETE"]),
    Route("/toolsets/{name}/export", export, methods=["GET"]),
    Route("/toolsets/{name}/repin", repin, methods=["POST"]),
    Route("/equipped", equipped, methods=["GET"]),
    Route("/equipped", equip, methods=["PUT"]),
    Route("/equipped", unequip, methods=["DELETE"]),
]
