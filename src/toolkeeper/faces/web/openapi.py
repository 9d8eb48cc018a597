"""The JSON API's OpenAPI document, made from the API routes themselves: each endpoint's
docstring carries its operation (YAML after a `---` line), so the document cannot drift from
the routes it describes. Served at `/api/openapi.json`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.routing import BaseRoute, Mount
from starlette.schemas import SchemaGenerator

from toolkeeper import __version__
from toolkeeper.faces.web.face import API_PREFIX

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["kind", "message"],
            "properties": {
                "kind": {
                    "type": "string",
                    "description": "not_found, invalid, conflict, unavailable, store, unauthorized or http",
                },
                "message": {"type": "string", "description": "what went wrong and what to do next"},
                "nextStep": {"type": "string"},
            },
        }
    },
}


def openapi_document(api_routes: Sequence[BaseRoute]) -> dict[str, Any]:
    generator = SchemaGenerator(
        {
            "openapi": "3.1.0",
            "info": {
                "title": "toolkeeper dashboard API",
                "version": __version__,
                "description": "Everything the dashboard's pages do, as JSON. Every request needs the "
                "dashboard's access token (or an admin client key) as `Authorization: Bearer <token>`. "
                "Refusals answer with an `Error` body: 401 no or wrong token, 403 a foreign Origin, "
                "404 not found, 409 a conflict or a stale change, 413 a body over the limit, 422 invalid "
                "input, 503 the servers or the store are not available.",
            },
            "components": {
                "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
                "schemas": {"Error": ERROR_SCHEMA},
            },
            "security": [{"token": []}],
        }
    )
    return generator.get_schema([Mount(API_PREFIX, routes=list(api_routes))])
