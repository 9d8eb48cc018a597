"""The API's OpenAPI document: served, and describing every API route with its answers."""

from __future__ import annotations

from pathlib import Path

from conftest import controllable
from openapi_spec_validator import OpenAPIV31SpecValidator
from web_support import config_for, running_dashboard

from toolkeeper.faces.web.api import documented_routes
from toolkeeper.faces.web.openapi import openapi_document

METHODS = ("get", "post", "put", "patch", "delete")


def test_every_api_route_is_documented_with_a_summary_and_its_answers() -> None:
    document = openapi_document(documented_routes())
    operations = [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]
    routed = {
        (f"/api{route.path}", method.lower())  # type: ignore[attr-defined]
        for route in documented_routes()
        for method in (route.methods or ())  # type: ignore[attr-defined]
        if method != "HEAD"
    }
    assert {(path, method) for path, method, _ in operations} == routed
    for path, method, operation in operations:
        assert operation.get("summary"), f"{method.upper()} {path} has no summary"
        assert "200" in {str(code)[0] + "00" for code in operation.get("responses", {})}, (
            f"{method.upper()} {path} documents no success answer"
        )


def test_the_document_is_valid_openapi_3_1() -> None:
    # A docstring's YAML that parses but means something else (an unquoted description with a
    # comma inside braces becomes a mapping) shows up here, not in the route test above.
    problems = [
        f"{'/'.join(map(str, error.path))}: {error.message}"
        for error in OpenAPIV31SpecValidator(openapi_document(documented_routes())).iter_errors()
    ]
    assert problems == []


def test_the_document_is_served_with_the_token(tmp_path: Path) -> None:
    with running_dashboard(config_for(tmp_path, {"ctl": controllable()})) as board:
        assert board.client.get("/api/openapi.json").status_code == 401
        served = board.client.get("/api/openapi.json", headers=board.auth)
        assert served.status_code == 200
        document = served.json()
        assert document["openapi"].startswith("3.")
        assert "/api/servers" in document["paths"]
