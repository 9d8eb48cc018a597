"""The gateway over stdio, in both eras, in front of real downstream servers."""

from __future__ import annotations

import json
import time

import anyio
import mcp_types as types
import pytest
from conftest import (
    MODES,
    PY,
    controllable,
    eventually,
    gateway_client,
    server_everything_entry,
    write_config,
)
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio


@pytest.fixture
def config(tmp_path):
    return write_config(
        tmp_path,
        {
            "ctl": controllable(timeout=2),
            "notes": {
                "command": PY,
                "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.sqlite")],
            },
            "files": {"command": PY, "args": ["-m", "toolkeeper.demo.files", "--root", str(tmp_path)]},
            "time": {
                "command": PY,
                "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
                "prefix": "clock",
            },
        },
    )


@pytest.mark.parametrize("mode", MODES)
async def test_lists_every_server_and_passes_tools_through_unchanged(config, mode):
    async with gateway_client(config, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"ctl__echo", "notes__search_notes", "files__manage_files", "clock__get_current_time"} <= set(
            tools
        )
        assert all(name.replace("_", "").replace("-", "").isalnum() and len(name) <= 64 for name in tools)
        echo = tools["ctl__echo"]
        assert echo.title == "Echo"
        assert echo.description == "Echo the text back."
        assert echo.input_schema["required"] == ["text"]
        assert echo.output_schema == {"type": "object", "properties": {"echo": {"type": "string"}}}
        assert echo.annotations == types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
        # Absent hints stay absent: tri-state survives the gateway.
        dumped = echo.annotations.model_dump(by_alias=True, exclude_unset=True)
        assert dumped == {"readOnlyHint": True, "openWorldHint": False}
        assert echo.icons and echo.icons[0].mime_type == "image/png"
        assert echo.meta == {"com.example/owner": "tests"}


@pytest.mark.parametrize("mode", MODES)
async def test_calls_are_routed_and_results_come_back_unchanged(config, mode):
    async with gateway_client(config, mode) as client:
        result = await client.call_tool("ctl__echo", {"text": "hi"})
        assert result.content[0].text == "hi" and result.structured_content == {"echo": "hi"}
        assert not result.is_error

        mixed = await client.call_tool("ctl__mixed_content", {})
        kinds = [c.type for c in mixed.content]
        assert kinds == ["text", "image", "audio", "resource", "resource_link"]
        assert mixed.content[0].annotations.priority == 0.5
        assert mixed.structured_content == {"n": 1}
        assert mixed.meta["com.example/trace"] == "abc"

        failed = await client.call_tool("ctl__fail", {})
        assert failed.is_error and failed.content[0].text == "it failed"

        created = await client.call_tool("notes__create_note", {"title": "T", "content": "C"})
        assert not created.is_error
        now = await client.call_tool("clock__get_current_time", {"timezone": "UTC"})
        assert json.loads(now.content[0].text)["timezone"] == "UTC"


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_tool_is_invalid_params_naming_it(config, mode):
    async with gateway_client(config, mode) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("ctl__nope", {})
        assert caught.value.error.code == -32602
        assert "ctl__nope" in caught.value.error.message


@pytest.mark.parametrize("mode", MODES)
async def test_progress_is_forwarded(config, mode):
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async with gateway_client(config, mode) as client:
        result = await client.call_tool("ctl__progress", {"steps": 3}, progress_callback=on_progress)
        assert result.content[0].text == "done 3"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_hanging_server_times_out_without_blocking_other_calls(config):
    async with gateway_client(config, "2026-07-28") as client:
        async with anyio.create_task_group() as tg:
            outcome = {}

            async def slow():
                outcome["slow"] = await client.call_tool("ctl__sleep", {"seconds": 30})
                outcome["slow_done"] = time.monotonic()

            started = time.monotonic()
            tg.start_soon(slow)
            await anyio.sleep(0.2)
            quick = await client.call_tool("ctl__echo", {"text": "still here"})
            outcome["quick_done"] = time.monotonic()
            assert quick.content[0].text == "still here"
        assert outcome["quick_done"] < outcome["slow_done"]
        assert outcome["slow"].is_error
        text = outcome["slow"].content[0].text
        assert "ctl" in text and "within 2s" in text
        assert outcome["slow_done"] - started < 10


@pytest.mark.parametrize("mode", MODES)
async def test_cancellation_reaches_the_downstream_server(tmp_path, mode):
    record = tmp_path / "requests.jsonl"
    config = write_config(tmp_path, {"ctl": controllable(server_args={"record": record})})

    def downstream_saw(method):
        lines = record.read_text().splitlines() if record.exists() else []
        return any(json.loads(line)["method"] == method for line in lines)

    async with gateway_client(config, mode) as client:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "ctl__sleep", {"seconds": 30})
                await eventually(lambda: downstream_saw("tools/call"))
                scope.cancel()
        await eventually(lambda: downstream_saw("notifications/cancelled"), timeout=10)
        # The gateway and the server still answer after a cancelled call.
        result = await client.call_tool("ctl__echo", {"text": "after"})
        assert result.content[0].text == "after"


async def test_server_everything_from_npm_over_stdio(tmp_path):
    entry = server_everything_entry()
    if entry is None:
        pytest.fail(
            "@modelcontextprotocol/server-everything is not installed; run ./scripts/test (it installs it)"
        )
    config = write_config(tmp_path, {"everything": entry})
    async with gateway_client(config, "legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "everything__echo" in names
        result = await client.call_tool("everything__echo", {"message": "via gateway"})
        assert "via gateway" in result.content[0].text


async def test_pagination_is_followed_to_the_end(tmp_path):
    # server-everything pages nothing, so check the gateway with a server of many tools instead:
    config = write_config(tmp_path, {"big": controllable(server_args={"extra-tools": 300})})
    async with gateway_client(config, "legacy") as client:
        tools = [t for t in (await client.list_tools()).tools if t.name.startswith("big__")]
        assert len(tools) == 10 + 300
        assert (await client.call_tool("big__extra_299", {})).content[0].text == "extra_299"


@pytest.mark.parametrize("mode", MODES)
async def test_downstream_list_changed_reaches_the_client(tmp_path, mode):
    config = write_config(tmp_path, {"ctl": controllable()})
    changes = 0

    async def on_message(message):
        nonlocal changes
        if isinstance(message, types.ToolListChangedNotification):
            changes += 1

    async with gateway_client(config, mode, message_handler=on_message) as client:
        await client.list_tools()
        if mode == "legacy":
            await client.call_tool("ctl__add_tool", {"name": "brand_new"})
            await eventually(lambda: changes >= 1)
        else:
            async with client.listen(tools_list_changed=True) as subscription:
                await client.call_tool("ctl__add_tool", {"name": "brand_new"})
                with anyio.fail_after(10):
                    async for _event in subscription:
                        break
        names = {t.name for t in (await client.list_tools()).tools}
        assert "ctl__brand_new" in names
        assert (await client.call_tool("ctl__brand_new", {})).content[0].text == "brand_new"
