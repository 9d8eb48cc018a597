"""Streamable HTTP on both sides: clients of the gateway, and downstream servers behind it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import anyio
import mcp_types as types
import pytest
from conftest import (
    CONTROLLABLE,
    MODES,
    PY,
    controllable,
    eventually,
    free_port,
    spawn,
    spawn_http_gateway,
    stop,
    wait_port,
    write_config,
)
from mcp import Client

pytestmark = pytest.mark.anyio


@pytest.fixture
def http_gateway(tmp_path):
    """`toolkeeper serve --transport http` with a steerable server and the demo notes server."""
    config = write_config(
        tmp_path,
        {
            "ctl": controllable(),
            "notes": {
                "command": PY,
                "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.sqlite")],
            },
        },
    )
    port = free_port()
    process = spawn_http_gateway(
        config,
        port,
    )
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


@pytest.mark.parametrize("mode", MODES)
async def test_http_clients_of_both_eras_list_and_call(http_gateway, mode):
    async with Client(http_gateway, mode=mode) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"ctl__echo", "notes__create_note"} <= names
        result = await client.call_tool("ctl__echo", {"text": "over http"})
        assert result.content[0].text == "over http"
        assert result.structured_content == {"echo": "over http"}


async def test_http_legacy_client_hears_list_changes(http_gateway):
    changes = 0

    async def on_message(message):
        nonlocal changes
        if isinstance(message, types.ToolListChangedNotification):
            changes += 1

    async with Client(http_gateway, mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities.tools.list_changed is True
        await client.list_tools()
        await client.call_tool("ctl__add_tool", {"name": "via_http"})
        await eventually(lambda: changes >= 1)
        assert "ctl__via_http" in {t.name for t in (await client.list_tools()).tools}


async def test_http_modern_client_hears_list_changes_on_its_listen_stream(http_gateway):
    async with Client(http_gateway, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.tools.list_changed is True
        async with client.listen(tools_list_changed=True) as subscription:
            await client.call_tool("ctl__add_tool", {"name": "modern_http"})
            with anyio.fail_after(10):
                async for _event in subscription:
                    break
        assert "ctl__modern_http" in {t.name for t in (await client.list_tools()).tools}


@pytest.mark.parametrize("mode", MODES)
async def test_http_downstream_gets_its_configured_headers(tmp_path, mode):
    port = free_port()
    record = tmp_path / "requests.jsonl"
    downstream = spawn([PY, CONTROLLABLE, "--http", str(port), "--record", str(record)], cwd=tmp_path)
    try:
        wait_port(port)
        config = write_config(
            tmp_path,
            {
                "remote": {
                    "type": "http",
                    "url": f"http://127.0.0.1:{port}/mcp",
                    "headers": {"Authorization": "Bearer ${TK_TEST_TOKEN}", "X-Team": "${TK_TEAM:-blue}"},
                }
            },
        )
        from conftest import gateway_params

        params = gateway_params(config, env={"TK_TEST_TOKEN": "sekrit"})
        async with Client(params, mode=mode) as client:
            result = await client.call_tool("remote__echo", {"text": "through"})
            assert result.content[0].text == "through"
        seen = [json.loads(line) for line in record.read_text().splitlines()]
        calls = [r for r in seen if r["method"] == "tools/call"]
        assert calls, seen
        assert all(r["headers"]["authorization"] == "Bearer sekrit" for r in calls)
        assert all(r["headers"]["x-team"] == "blue" for r in calls)
    finally:
        stop(downstream)


async def test_http_downstream_that_goes_away_comes_back(tmp_path):
    port = free_port()
    downstream = spawn([PY, CONTROLLABLE, "--http", str(port)], cwd=tmp_path)
    config = write_config(tmp_path, {"remote": {"url": f"http://127.0.0.1:{port}/mcp", "timeout": 5}})
    from conftest import gateway_params

    try:
        wait_port(port)
        async with Client(gateway_params(config), mode="legacy") as client:
            assert (await client.call_tool("remote__echo", {"text": "1"})).content[0].text == "1"
            stop(downstream)
            down = await client.call_tool("remote__echo", {"text": "2"})
            assert down.is_error and "remote" in down.content[0].text
            downstream = spawn([PY, CONTROLLABLE, "--http", str(port)], cwd=tmp_path)
            wait_port(port)

            async def echoes():
                result = await client.call_tool("remote__echo", {"text": "3"})
                return not result.is_error and result.content[0].text == "3"

            await eventually(echoes, timeout=40, interval=0.5)
    finally:
        stop(downstream)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def test_http_endpoint_refuses_rebinding_and_oversized_requests_and_never_buffers(tmp_path):
    config = write_config(
        tmp_path,
        {"ctl": controllable()},
        # Reachable beyond loopback by that name: authentication is turned off on purpose, so
        # that what is checked here is the edge's Host and Origin check alone.
        http={"allowedHosts": ["gw.example.com"], "maxRequestBytes": 4096, "auth": {"mode": "none"}},
    )
    port = free_port()
    process = spawn_http_gateway(
        config,
        port,
        env={"TOOLKEEPER_HTTP_ALLOWED_ORIGINS": "https://app.example.com"},
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def post(body=INITIALIZE, **headers):
        request = urllib.request.Request(url, json.dumps(body).encode(), {**MCP_HEADERS, **headers})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers)
        except urllib.error.HTTPError as refused:
            return refused.code, dict(refused.headers)

    try:
        wait_port(port)
        # A page on a name that resolves to this machine must not reach the gateway.
        assert post(Host="evil.example.com")[0] == 421
        assert post(Origin="http://evil.example.com")[0] == 403
        for accepted in ({}, {"Host": f"localhost:{port}"}, {"Host": "gw.example.com"}):
            status, headers = post(**accepted)
            assert status == 200, accepted
            assert headers["x-accel-buffering"] == "no"
        assert post(Origin="https://app.example.com")[0] == 200
        oversized = {**INITIALIZE, "params": {**INITIALIZE["params"], "padding": "x" * 8000}}
        assert post(oversized)[0] == 413
        assert post()[0] == 200  # still serving
    finally:
        stop(process)
