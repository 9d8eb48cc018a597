"""The JSON API's OpenAPI document, made from the API routes themselves: each endpoint's
docstring carries its operation (YAML after a `---` line), so the document cannot drift from
the routes it describes. Served at `/api/openapi.json`."""

from __future__ import annotations

import re
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
    document = generator.get_schema([Mount(API_PREFIX, routes=list(api_routes))])
    for path, item in document.get("paths", {}).items():
        for operation in item.values():
            _declare_path_parameters(path, operation)
            # YAML reads `200:` as a number; OpenAPI's response keys are strings.
            answers = operation.get("responses", {})
            operation["responses"] = {str(code): answer for code, answer in answers.items()}
    return document


def _declare_path_parameters(path: str, operation: dict[str, Any]) -> None:
    """Each `{name}` of the path as a required string parameter, where the operation does not
    declare it itself: the route's path already says it, so no docstring repeats it."""
    declared = {p.get("name") for p in operation.get("parameters", []) if p.get("in") == "path"}
    missing = [name for name in re.findall(r"{([^}]+)}", path) if name not in declared]
    operation["parameters"] = [
        *({"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in missing),
        *operation.get("parameters", []),
    ]
