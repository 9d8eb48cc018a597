"""The JSON API under `/api/`: everything the pages do, for programs. Documented in the README;
its OpenAPI document is served at `/api/openapi.json`."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web import api_tools
from toolkeeper.faces.web.face import JsonResponse, face_of
from toolkeeper.services.inspect import server_rows


async def servers(request: Request) -> Response:
    return JsonResponse({"servers": server_rows(face_of(request).gateway)})


def routes() -> list[BaseRoute]:
    return [Route("/servers", servers, methods=["GET"]), *api_tools.ROUTES]
