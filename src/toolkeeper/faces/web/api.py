"""The JSON API under `/api/`: everything the pages do, for programs. Each area's routes live in
its own `api_<area>.py`; every endpoint documents itself in its docstring, from which
`/api/openapi.json` is made (openapi.py). Documented for people in the README."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web import (
    api_approvals,
    api_audit,
    api_search,
    api_servers,
    api_signin,
    api_tool,
    api_tools,
    api_toolsets,
)
from toolkeeper.faces.web.face import JsonResponse
from toolkeeper.faces.web.openapi import openapi_document


def documented_routes() -> list[BaseRoute]:
    """Every API route the OpenAPI document describes."""
    # The list's own paths (`/tools/bulk`) before one tool's (`/tools/{name}`).
    return [
        *api_servers.ROUTES,
        *api_signin.ROUTES,
        *api_tools.ROUTES,
        *api_search.ROUTES,
        *api_tool.ROUTES,
        *api_toolsets.ROUTES,
        *api_approvals.ROUTES,
        *api_audit.ROUTES,
    ]


async def openapi(request: Request) -> Response:
    """This API's OpenAPI document."""
    return JsonResponse(openapi_document(documented_routes()))


def routes() -> list[BaseRoute]:
    return [*documented_routes(), Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False)]
