"""The JSON API under `/api/`: everything the pages do, for programs. Each area's routes live in
its own `api_<area>.py`; every endpoint documents itself in its docstring, from which
`/api/openapi.json` is made (openapi.py). Documented for people in the README."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web import api_approvals, api_audit, api_tool, api_tools
from toolkeeper.faces.web.face import JsonResponse, face_of
from toolkeeper.faces.web.openapi import openapi_document
from toolkeeper.services.inspect import server_rows


async def servers(request: Request) -> Response:
    """The servers and their state.
    ---
    summary: List the servers
    description: Each configured server with its state, era, trust, tool count and last error.
    responses:
      200: {description: "`{servers: [...]}`"}
      401: {description: No or a wrong token}
    """
    return JsonResponse({"servers": server_rows(face_of(request).gateway)})


def documented_routes() -> list[BaseRoute]:
    """Every API route the OpenAPI document describes."""
    # The list's own paths (`/tools/bulk`) before one tool's (`/tools/{name}`).
    return [
        Route("/servers", servers, methods=["GET"]),
        *api_tools.ROUTES,
        *api_tool.ROUTES,
        *api_approvals.ROUTES,
        *api_audit.ROUTES,
    ]


async def openapi(request: Request) -> Response:
    """This API's OpenAPI document."""
    return JsonResponse(openapi_document(documented_routes()))


def routes() -> list[BaseRoute]:
    return [*documented_routes(), Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False)]
