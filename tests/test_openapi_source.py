"""An OpenAPI source end to end: a real REST API on 127.0.0.1 (tests/rest_api.py), the real
gateway, a real MCP client of both eras. Every method; path, query, header and cookie
parameters, arrays and a JSON body; auth by header and by query; a 404, a 500, a slow endpoint,
a huge response, redirects; arguments refused before any request; the hints of the method in
`tools/list`; a spec edited while serving; a spec that cannot be loaded."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import MODES, controllable, eventually, free_port
from mcp import Client
from mcp.shared.exceptions import MCPError
from rest_api import HEADER_KEY, HUGE_BYTES, QUERY_KEY, RestApi, running_api, spec_document

from toolkeeper.config.loader import parse_config_text
from toolkeeper.downstreams.base import State
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.edge.clients import client_of
from toolkeeper.faces.mcp.server import build_server
from toolkeeper.protocol import INVALID_PARAMS
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.store import Store

pytestmark = pytest.mark.anyio

KEYS = {"HEADER_KEY": HEADER_KEY, "QUERY_KEY": QUERY_KEY}


@pytest.fixture
def api() -> Iterator[RestApi]:
    with running_api() as running:
        yield running


def entry(api: RestApi, **keys: Any) -> dict[str, Any]:
    return {
        "type": "openapi",
        "spec": api.spec_url,
        "prefix": "api",
        "auth": {"headerKey": "HEADER_KEY", "queryKey": "${QUERY_KEY}"},
        **keys,
    }


@asynccontextmanager
async def serving(
    tmp_path: Path,
    servers: Mapping[str, Any],
    mode: str,
    *,
    environ: Mapping[str, str] | None = None,
    message_handler: Any = None,
) -> AsyncIterator[tuple[Client, Gateway]]:
    """The real gateway in this process with `servers`, every call run unasked, and a client."""
    text = json.dumps({"mcpServers": servers, "toolkeeper": {"confirm": "never"}})
    config = parse_config_text(text, environ=KEYS if environ is None else environ, kinds=KINDS.entries)
    assert config.skipped == {}
    async with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        gateway = Gateway(config, store)
        async with anyio.create_task_group() as tg:
            await tg.start(gateway.run)
            await gateway.started.wait()
            options = {"message_handler": message_handler} if message_handler else {}
            async with Client(build_server(gateway, client_of), mode=mode, **options) as client:
                yield client, gateway
            tg.cancel_scope.cancel()


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent), result
    return result.content[0].text


def hints_of(tool: types.Tool) -> dict[str, Any]:
    assert tool.annotations is not None
    return tool.annotations.model_dump(exclude_none=True, by_alias=True)


# -- listing -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_operations_are_listed_with_the_hints_of_their_method(
    tmp_path: Path, api: RestApi, mode: str
) -> None:
    async with serving(tmp_path, {"items": entry(api)}, mode) as (client, _):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert {"api__listItems", "api__getItem", "api__createItem", "api__deleteItem"} <= set(tools)
    read_only = {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": True,
    }
    for name in ("api__listItems", "api__getItem", "api__headPing", "api__optionsPing"):
        assert hints_of(tools[name]) == read_only, name
    assert hints_of(tools["api__deleteItem"]) == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": True,
    }
    assert hints_of(tools["api__replaceItem"])["idempotentHint"] is True
    assert hints_of(tools["api__replaceItem"])["destructiveHint"] is False
    for name in ("api__createItem", "api__patchItem"):
        assert hints_of(tools[name])["idempotentHint"] is False
    assert tools["api__listItems"].title == "List items"


async def test_open_world_false_closes_every_tool_of_the_source(tmp_path: Path, api: RestApi) -> None:
    async with serving(tmp_path, {"items": entry(api, openWorld=False)}, "legacy") as (client, _):
        tools = (await client.list_tools()).tools
    assert tools and all(hints_of(tool)["openWorldHint"] is False for tool in tools)


async def test_include_by_method_gives_a_read_only_view(tmp_path: Path, api: RestApi) -> None:
    servers = {"items": entry(api, include={"methods": ["get"]}, exclude={"operationIds": ["slo*"]})}
    async with serving(tmp_path, servers, "legacy") as (client, _):
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert "api__listItems" in names and "api__slow" not in names
    assert not names & {"api__createItem", "api__deleteItem", "api__replaceItem", "api__patchItem"}


# -- calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_every_method_makes_its_real_request(tmp_path: Path, api: RestApi, mode: str) -> None:
    async with serving(tmp_path, {"items": entry(api)}, mode) as (client, _):
        created = await client.call_tool("api__createItem", {"name": "pen", "tags": ["office", "red"]})
        assert not created.is_error, created
        assert created.structured_content == {"id": 1, "name": "pen", "tags": ["office", "red"]}
        await client.call_tool("api__createItem", {"name": "cup", "tags": ["kitchen"]})

        listed = await client.call_tool("api__listItems", {"tag": ["office", "garden"], "limit": 5})
        assert [item["name"] for item in json.loads(text_of(listed))["items"]] == ["pen"]

        got = await client.call_tool("api__getItem", {"item_id": 1})
        assert json.loads(text_of(got))["name"] == "pen"
        replaced = await client.call_tool("api__replaceItem", {"item_id": 1, "name": "pencil"})
        assert json.loads(text_of(replaced)) == {"id": 1, "name": "pencil"}
        patched = await client.call_tool("api__patchItem", {"item_id": 1, "tags": ["school"]})
        assert json.loads(text_of(patched)) == {"id": 1, "name": "pencil", "tags": ["school"]}
        assert not (await client.call_tool("api__headPing", {})).is_error
        assert not (await client.call_tool("api__optionsPing", {})).is_error

        deleted = await client.call_tool("api__deleteItem", {"item_id": 1})
        assert not deleted.is_error, deleted
        assert "answered 204" in text_of(deleted), "an empty success still says what happened"
        assert 1 not in api.items

        missing = await client.call_tool("api__getItem", {"item_id": 1})
        assert missing.is_error
        assert "GET " in text_of(missing) and "/api/items/1 answered 404 Not Found" in text_of(missing)
        assert "no item 1" in text_of(missing)
    methods = {method for method, _ in api.received}
    assert methods == {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


async def test_arguments_go_to_path_query_header_and_cookie_in_their_style(
    tmp_path: Path, api: RestApi
) -> None:
    async with serving(tmp_path, {"items": entry(api)}, "2026-07-28") as (client, _):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        properties = tools["api__echo"].input_schema["properties"]
        assert set(properties) == {"name", "ids", "flags", "X-Mode", "pref"}
        assert not (await client.call_tool("api__redirectSame", {})).is_error  # the API sets a cookie
        result = await client.call_tool(
            "api__echo",
            {"name": "a/b c?d", "ids": [1, 2], "flags": ["x", "y"], "X-Mode": "fast", "pref": "dark; x=1"},
        )
        without_cookie = await client.call_tool("api__echo", {"name": "plain"})
    assert json.loads(text_of(without_cookie))["cookies"] == {}
    assert not result.is_error, result
    echoed = json.loads(text_of(result))
    # The path value is encoded whole: its slash and question mark add no segment nor query.
    assert echoed["raw_path"] == "/api/echo/a%2Fb%20c%3Fd"
    assert echoed["ids"] == ["1", "2"]  # form, exploded: ids=1&ids=2
    assert echoed["flags"] == "x,y"  # form, not exploded
    assert echoed["mode"] == "fast"
    # Only the call's own cookie, its value encoded whole; none the API set on an earlier call.
    assert echoed["cookies"] == {"pref": "dark%3B%20x%3D1"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_path_value_never_changes_which_resource_is_called(
    tmp_path: Path, api: RestApi, mode: str
) -> None:
    """`..` and `.` would be dot segments (`/api/echo/..` is `/api/`): they are sent encoded,
    as is whatever else could end or climb a segment."""
    sent = {"..": "%2E%2E", ".": "%2E", "%2e%2e": "%252e%252e", "../..": "..%2F..", "...": "..."}
    async with serving(tmp_path, {"items": entry(api)}, mode) as (client, _):
        for value, raw in sent.items():
            result = await client.call_tool("api__echo", {"name": value})
            assert not result.is_error, (value, result)
            assert json.loads(text_of(result))["raw_path"] == f"/api/echo/{raw}", value
    assert all(path.startswith("/api/echo/") for _, path in api.received)


async def test_auth_by_header_and_by_query_from_the_environment(tmp_path: Path, api: RestApi) -> None:
    async with serving(tmp_path, {"items": entry(api)}, "legacy") as (client, _):
        by_header = await client.call_tool("api__secureHeader", {})
        by_query = await client.call_tool("api__secureQuery", {})
    assert (text_of(by_header), text_of(by_query)) == ("header key accepted", "query key accepted")


async def test_a_scheme_without_a_value_is_reported_and_nothing_is_sent_for_it(
    tmp_path: Path, api: RestApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    async with serving(tmp_path, {"items": entry(api)}, "legacy", environ={}) as (client, _):
        refused = await client.call_tool("api__secureHeader", {})
    assert refused.is_error and "401" in text_of(refused) and "missing or wrong X-API-Key" in text_of(refused)
    said = " ".join(record.getMessage() for record in caplog.records)
    assert "security scheme 'headerKey' has no value: environment variable HEADER_KEY" in said
    assert "security scheme 'queryKey' has no value: environment variable QUERY_KEY" in said


async def test_a_local_spec_without_servers_and_a_base_url_is_not_warned_about(
    tmp_path: Path, api: RestApi, caplog: pytest.LogCaptureFixture
) -> None:
    # Found trying it as a new user: baseUrl set, the log still said "(set baseUrl)".
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    document = spec_document(api)
    del document["servers"]
    spec = tmp_path / "no-servers.json"
    spec.write_text(json.dumps(document))
    servers = {"items": {**entry(api), "spec": str(spec), "baseUrl": f"{api.url}/api"}}
    async with serving(tmp_path, servers, "legacy") as (client, _):
        listed = await client.call_tool("api__listItems", {})
    assert not listed.is_error, text_of(listed)
    said = " ".join(record.getMessage() for record in caplog.records)
    assert "set baseUrl" not in said and "is relative" not in said, said


async def test_errors_timeouts_big_responses_and_redirects_are_results(tmp_path: Path, api: RestApi) -> None:
    servers = {"items": entry(api, timeout=1, maxResponseBytes=1000)}
    async with serving(tmp_path, servers, "legacy") as (client, _):
        failed = await client.call_tool("api__fail", {})
        slow = await client.call_tool("api__slow", {})
        huge = await client.call_tool("api__huge", {})
        same = await client.call_tool("api__redirectSame", {})
        away = await client.call_tool("api__redirectAway", {})
    assert failed.is_error
    assert text_of(failed) == f"GET {api.url}/api/fail answered 500 Internal Server Error: database on fire"
    assert slow.is_error
    assert text_of(slow) == (
        f"GET {api.url}/api/slow did not answer within 1s (the server's 'timeout' setting)"
    )
    assert not huge.is_error
    assert text_of(huge).startswith("x" * 1000 + "\n[the response was cut at 1000 bytes")
    assert len(text_of(huge)) < HUGE_BYTES
    assert not same.is_error and ("GET", "/api/ping") in api.received
    assert away.is_error and "http://example.invalid:80, another origin" in text_of(away)


@pytest.mark.parametrize("mode", MODES)
async def test_a_response_unlike_the_declared_output_is_an_error_holding_it(
    tmp_path: Path, api: RestApi, mode: str
) -> None:
    async with serving(tmp_path, {"items": entry(api)}, mode) as (client, _):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["api__drift"].output_schema is not None
        drifted = await client.call_tool("api__drift", {})  # the SDK client checks structured output
    assert drifted.is_error and drifted.structured_content is None
    assert text_of(drifted) == (
        f"GET {api.url}/api/drift answered, but the response does not match the spec's schema at count: "
        "'many' is not of type 'integer', so it is not this tool's output as declared:\n"
        '{"count":"many"}'
    )


async def test_an_api_that_is_not_there_is_an_error_naming_the_url(tmp_path: Path, api: RestApi) -> None:
    closed = f"http://127.0.0.1:{free_port()}/api"
    async with serving(tmp_path, {"items": entry(api, baseUrl=closed)}, "legacy") as (client, _):
        result = await client.call_tool("api__listItems", {})
    assert result.is_error
    assert text_of(result).startswith(f"GET {closed}/items failed: ")


@pytest.mark.parametrize("mode", MODES)
async def test_arguments_that_fail_the_schema_are_refused_before_any_request(
    tmp_path: Path, api: RestApi, mode: str
) -> None:
    async with serving(tmp_path, {"items": entry(api)}, mode) as (client, _):
        before = len(api.received)
        for arguments in ({"limit": "many"}, {"limit": 0}, {"tag": "not-a-list"}):
            with pytest.raises(MCPError) as refused:
                await client.call_tool("api__listItems", arguments)
            assert refused.value.error.code == INVALID_PARAMS
            assert "Nothing was sent" in refused.value.error.message
        with pytest.raises(MCPError) as missing:
            await client.call_tool("api__getItem", {})
        assert "'item_id' is a required property" in missing.value.error.message
        with pytest.raises(MCPError) as empty:
            await client.call_tool("api__echo", {"name": ""})
        assert empty.value.error.code == INVALID_PARAMS
        assert "the path parameter 'name' is empty" in empty.value.error.message
    assert len(api.received) == before


# -- the spec changing, or unusable ---------------------------------------------------------


def write_spec(path: Path, api: RestApi, *, without: tuple[str, ...] = ()) -> None:
    document = spec_document(api)
    for route in without:
        del document["paths"][route]
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("mode", MODES)
async def test_an_edited_spec_file_reaches_clients_as_a_tool_list_change(
    tmp_path: Path, api: RestApi, mode: str
) -> None:
    spec = tmp_path / "items.json"
    write_spec(spec, api, without=("/fail",))
    changes = 0

    async def on_message(message: Any) -> None:
        nonlocal changes
        if isinstance(message, types.ToolListChangedNotification):
            changes += 1

    servers = {"items": entry(api, spec=str(spec))}
    async with serving(tmp_path, servers, mode, message_handler=on_message) as (client, _):
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "api__fail" not in names
        if mode == "legacy":
            write_spec(spec, api, without=("/slow",))
            await eventually(lambda: changes >= 1)
        else:
            async with client.listen(tools_list_changed=True) as subscription:
                write_spec(spec, api, without=("/slow",))
                with anyio.fail_after(20):
                    async for _event in subscription:
                        break
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "api__fail" in names and "api__slow" not in names
        assert (await client.call_tool("api__fail", {})).is_error


async def test_an_invalid_spec_skips_its_source_while_the_others_serve(tmp_path: Path, api: RestApi) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text("openapi: 3.1.0\npaths: [unclosed\n")
    servers = {"items": entry(api, spec=str(spec)), "ctl": controllable()}
    async with serving(tmp_path, servers, "legacy") as (client, gateway):
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "ctl__echo" in names and not any(name.startswith("api__") for name in names)
        source = gateway.pool["items"]
        assert source.state is State.STOPPED
        assert source.last_error is not None and str(spec) in source.last_error
        assert (await client.call_tool("ctl__echo", {"text": "still here"})).content

        write_spec(spec, api)  # fixed: it serves again, without a restart

        async def listed() -> bool:
            return "api__listItems" in {tool.name for tool in (await client.list_tools()).tools}

        await eventually(listed)
        assert source.state is State.READY and source.last_error is None
