"""A list larger than a client takes in one event still reaches it over HTTP: the gateway answers
a list request with one JSON response when the client accepts one."""

from __future__ import annotations

import json
import urllib.request

import pytest
from conftest import MODES, http_gateway_url, write_config
from mcp import Client

pytestmark = pytest.mark.anyio

# Twice the 1 MiB the SDK's client takes in one event of a stream.
HUGE_DESCRIPTION = "Reads one record. " + "x" * (2 * 1024 * 1024)


def _spec_with_a_huge_description() -> dict[str, object]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "huge", "version": "1"},
        "paths": {
            "/records/{id}": {
                "get": {
                    "operationId": "get_record",
                    "description": HUGE_DESCRIPTION,
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"description": "ok"}},
                }
            },
            "/records": {
                "get": {"operationId": "list_records", "responses": {"200": {"description": "ok"}}},
            },
        },
    }


@pytest.fixture
def gateway_with_a_huge_tool(tmp_path):
    spec = tmp_path / "huge.json"
    spec.write_text(json.dumps(_spec_with_a_huge_description()))
    config = write_config(
        tmp_path,
        {"huge": {"type": "openapi", "spec": str(spec), "baseUrl": "http://127.0.0.1:9"}},
        featureFlags={"enableConfigToolsMenu": False},
    )
    with http_gateway_url(config) as url:
        yield url


@pytest.mark.parametrize("mode", MODES)
async def test_a_list_over_a_megabyte_reaches_sdk_clients_of_both_eras(gateway_with_a_huge_tool, mode):
    async with Client(gateway_with_a_huge_tool, mode=mode) as client:
        tools = {
            tool.name: tool for tool in (await client.list_tools()).tools if tool.name.startswith("huge__")
        }
    assert set(tools) == {"huge__get_record", "huge__list_records"}
    assert tools["huge__get_record"].description == HUGE_DESCRIPTION


def test_a_list_request_in_a_session_is_answered_with_one_json_response_with_its_session_header(
    gateway_with_a_huge_tool,
):
    def post(
        body: dict[str, object], accept: str, session: str | None = None
    ) -> tuple[str, dict[str, str], bytes]:
        headers = {"content-type": "application/json", "accept": accept, "mcp-protocol-version": "2025-11-25"}
        if session:
            headers["mcp-session-id"] = session
        request = urllib.request.Request(gateway_with_a_huge_tool, json.dumps(body).encode(), headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.headers.get("content-type", ""), dict(response.headers), response.read()

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    both = "application/json, text/event-stream"
    _, headers, _ = post(initialize, both)
    session = headers.get("mcp-session-id") or headers.get("Mcp-Session-Id")
    assert session
    post({"jsonrpc": "2.0", "method": "notifications/initialized"}, both, session)
    kind, headers, body = post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, both, session)
    assert kind.startswith("application/json")
    assert session == (headers.get("mcp-session-id") or headers.get("Mcp-Session-Id"))
    assert int(
        headers["content-length"] if "content-length" in headers else headers["Content-Length"]
    ) == len(body)
    answer = json.loads(body)
    assert answer["id"] == 2
    assert {"huge__get_record", "huge__list_records"} <= {tool["name"] for tool in answer["result"]["tools"]}
