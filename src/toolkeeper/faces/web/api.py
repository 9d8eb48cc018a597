"""The JSON API under `/api/`: everything the pages do, for programs. Documented in the README;
its OpenAPI document is served at `/api/openapi.json`."""

from __future__ import annotations

from starlette.routing import BaseRoute

from toolkeeper.faces.web import api_servers, api_toolsets


def routes() -> list[BaseRoute]:
    return [*api_servers.ROUTES, *api_toolsets.ROUTES]
