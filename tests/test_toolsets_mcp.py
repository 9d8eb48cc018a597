"""Toolsets, notes and configuration mode through a real MCP client (both eras), seeds 000 and 001.

Every test starts the gateway as a subprocess over stdio with real downstream servers (the
controllable test server and the bundled notes demo) and a real SQLite store in tmp_path.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.conftest import MODES, controllable, eventually, gateway_params, write_config

pytestmark = pytest.mark.anyio

MENU_ON = {"TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "true"}
CONFIG_TOOLS = [
    "list-available-tools",
    "build-toolset",
    "list-saved-toolsets",
    "equip-toolset",
    "unequip-toolset",
    "delete-toolset",
    "get-active-toolset",
    "add-tool-annotation",
    "remove-tool-annotation",
    "export-toolset",
    "import-toolset",
    "set-tool-hints",
    "set-argument-rules",
    "set-tool-confirm",
    "explain-tool-policy",
    "exit-configuration-mode",
]


def two_servers(tmp_path: Path, **ctl_args: Any) -> Path:
    notes = {
        "command": sys.executable,
        "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.db")],
    }
    return write_config(tmp_path, {"ctl": controllable(server_args=ctl_args), "notes": notes})


class ListChanges:
    """Counts tools/list_changed notifications in either era."""

    def __init__(self) -> None:
        self.count = 0

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1

    async def after(self, before: int, timeout: float = 10.0) -> None:
        await eventually(lambda: self.count > before, timeout=timeout)


@asynccontextmanager
async def menu_client(
    config: Path, mode: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[Client, ListChanges]]:
    changes = ListChanges()
    params = gateway_params(config, env={**MENU_ON, **(env or {})})
    async with Client(params, mode=mode, message_handler=changes.on_message) as client:
        if mode == "legacy":
            yield client, changes
            return
        async with client.listen(tools_list_changed=True) as subscription:

            async def count() -> None:
                async for _event in subscription:
                    changes.count += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(count)
                yield client, changes
                tg.cancel_scope.cancel()


async def names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def ok(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result.content[0].text
    text = json.loads(result.content[0].text)
    assert result.structured_content == text
    return text


async def refused(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> str:
    result = await client.call_tool(tool, arguments or {})
    assert result.is_error, result
    return result.content[0].text


async def saved_names(client: Client) -> list[str]:
    return [t["name"] for t in (await ok(client, "list-saved-toolsets"))["toolsets"]]


@pytest.mark.parametrize("mode", MODES)
async def test_done_when_build_equip_annotate_restart(tmp_path: Path, mode: str) -> None:
    config = two_servers(tmp_path)
    async with menu_client(config, mode) as (client, changes):
        # Nothing equipped yet: start in configuration mode, which lists only configuration tools.
        assert await names(client) == CONFIG_TOOLS
        available = await ok(client, "list-available-tools")
        servers = {s["serverName"]: s for s in available["toolsByServer"]}
        assert set(servers) == {"ctl", "notes"}
        create = next(t for t in servers["notes"]["tools"] if t["name"] == "create_note")
        assert create["namespacedName"] == "notes.create_note" and len(create["refId"]) == 64

        before = changes.count
        built = await ok(
            client,
            "build-toolset",
            {
                "name": "daily-notes",
                "description": "Notes and echo",
                # One tool by namespacedName, one by refId: both identities are stored either way.
                "tools": [{"namespacedName": "ctl.echo"}, {"refId": create["refId"]}],
                "autoEquip": True,
            },
        )
        assert built["autoEquipped"] is True
        stored = built["toolset"]["tools"]
        assert [t["namespacedName"] for t in stored] == ["ctl.echo", "notes.create_note"]
        assert all(len(t["refId"]) == 64 for t in stored)
        await changes.after(before)
        # autoEquip returned to normal mode: the toolset's tools plus the way back.
        assert await names(client) == ["ctl__echo", "notes__create_note", "enter-configuration-mode"]
        assert (await client.call_tool("ctl__echo", {"text": "hi"})).content[0].text == "hi"

        await ok(client, "enter-configuration-mode")
        added = await ok(
            client,
            "add-tool-annotation",
            {
                "toolRef": {"namespacedName": "notes.create_note"},
                "notes": [
                    {"name": "category-rule", "note": "Always set a category; ask if unsure."},
                    {"name": "title-style", "note": "Titles in sentence case → short."},
                ],
            },
        )
        assert added["successCount"] == 2 and added["tool"]["namespacedName"] == "notes.create_note"
        before = changes.count
        await ok(client, "exit-configuration-mode")
        await changes.after(before)
        listed = {t.name: t for t in (await client.list_tools()).tools}
        original = next(t for t in available["toolsByServer"][1]["tools"] if t["name"] == "create_note")[
            "description"
        ]
        expected = (
            f"{original}\n\n### Additional Tool Notes\n\n"
            "• **category-rule**: Always set a category; ask if unsure.\n"
            "• **title-style**: Titles in sentence case → short."
        )
        assert listed["notes__create_note"].description == expected
        # Listing again never appends the notes twice.
        again = {t.name: t for t in (await client.list_tools()).tools}
        assert again["notes__create_note"].description == expected
        assert listed["ctl__echo"].description == "Echo the text back."

    # A new gateway process on the same store: same toolset, normal mode, same notes.
    async with menu_client(config, mode) as (client, _):
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert list(listed) == ["ctl__echo", "notes__create_note", "enter-configuration-mode"]
        assert listed["notes__create_note"].description == expected
        await ok(client, "enter-configuration-mode")
        active = await ok(client, "get-active-toolset")
        assert active["equipped"] is True and active["toolset"]["name"] == "daily-notes"
        assert active["exposedTools"] == ["ctl__echo", "notes__create_note"]
        assert active["mode"] == "configuration"


@pytest.mark.parametrize("mode", MODES)
async def test_mode_switches_are_explicit_and_notify(tmp_path: Path, mode: str) -> None:
    config = two_servers(tmp_path)
    async with menu_client(config, mode) as (client, changes):
        # enter-configuration-mode in configuration mode: a harmless no-op, never a toggle.
        for _ in range(2):
            result = await ok(client, "enter-configuration-mode")
            assert result["currentMode"] == "configuration" and result["changed"] is False
        assert await names(client) == CONFIG_TOOLS

        before = changes.count
        result = await ok(client, "exit-configuration-mode")
        assert result["changed"] is True
        await changes.after(before)
        # Normal mode with nothing equipped lists only the way into configuration mode.
        assert await names(client) == ["enter-configuration-mode"]
        for _ in range(2):  # exit in normal mode: no-op
            assert (await ok(client, "exit-configuration-mode"))["changed"] is False
        assert await names(client) == ["enter-configuration-mode"]

        # Hidden tools: -32602 naming the mode that shows them.
        with pytest.raises(MCPError) as hidden:
            await client.call_tool("build-toolset", {"name": "x", "tools": []})
        assert hidden.value.error.code == -32602
        assert "configuration mode" in hidden.value.error.message
        with pytest.raises(MCPError) as outside:
            await client.call_tool("ctl__echo", {"text": "x"})
        assert outside.value.error.code == -32602
        assert "none is equipped" in outside.value.error.message

        await ok(client, "enter-configuration-mode")
        await ok(client, "build-toolset", {"name": "echo-only", "tools": [{"namespacedName": "ctl.echo"}]})
        assert await names(client) == CONFIG_TOOLS  # built without autoEquip: still configuring
        with pytest.raises(MCPError) as in_toolset:
            await client.call_tool("ctl__echo", {"text": "x"})
        assert "not in any equipped toolset" in in_toolset.value.error.message

        before = changes.count
        await ok(client, "equip-toolset", {"name": "echo-only"})  # auto-exit to normal mode
        await changes.after(before)
        assert await names(client) == ["ctl__echo", "enter-configuration-mode"]

        await ok(client, "enter-configuration-mode")
        with pytest.raises(MCPError) as normal_only:
            await client.call_tool("ctl__echo", {"text": "x"})
        assert "normal mode" in normal_only.value.error.message and "exit-configuration-mode" in (
            normal_only.value.error.message
        )
        # Re-equipping the equipped toolset from configuration mode still returns to normal mode.
        await ok(client, "equip-toolset", {"name": "echo-only"})
        assert await names(client) == ["ctl__echo", "enter-configuration-mode"]

        # Unequip (from configuration mode) leaves normal mode empty but for the mode tool.
        await ok(client, "enter-configuration-mode")
        await ok(client, "unequip-toolset")
        await ok(client, "exit-configuration-mode")
        assert await names(client) == ["enter-configuration-mode"]


async def test_annotation_rules_of_seed_000(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    async with menu_client(config, "legacy") as (client, _):
        note = [{"name": "tip", "note": "text"}]
        # No toolset equipped.
        text = await refused(
            client, "add-tool-annotation", {"toolRef": {"namespacedName": "ctl.echo"}, "notes": note}
        )
        assert "No toolset is currently equipped" in text and "build-toolset" in text
        await ok(client, "build-toolset", {"name": "one", "tools": [{"namespacedName": "ctl.echo"}]})
        await ok(client, "equip-toolset", {"name": "one"})
        await ok(client, "enter-configuration-mode")
        # Unresolvable reference, and a tool that is not in the equipped toolset.
        text = await refused(
            client, "add-tool-annotation", {"toolRef": {"namespacedName": "ctl.nope"}, "notes": note}
        )
        assert "Tool not found: ctl.nope" in text
        text = await refused(
            client, "add-tool-annotation", {"toolRef": {"namespacedName": "ctl.pid"}, "notes": note}
        )
        assert text == 'Tool "ctl.pid" is not in the current toolset "one".'
        # Note names: lowercase, numbers, hyphens (schema-checked before anything is written).
        text = await refused(
            client,
            "add-tool-annotation",
            {"toolRef": {"namespacedName": "ctl.echo"}, "notes": [{"name": "Bad Name", "note": "x"}]},
        )
        assert "notes/0/name" in text and "does not match" in text
        text = await refused(client, "add-tool-annotation", {"toolRef": {}, "notes": note})
        assert "toolRef" in text
        assert (await ok(client, "list-saved-toolsets"))["toolsets"][0]["toolNotes"] == []

        # Several at once, by refId; an existing name is skipped with a warning (additive).
        ref = (await ok(client, "get-active-toolset"))["toolset"]["tools"][0]["refId"]
        first = await ok(
            client,
            "add-tool-annotation",
            {
                "toolRef": {"refId": ref},
                "notes": [{"name": "a", "note": "one"}, {"name": "b", "note": "two"}],
            },
        )
        assert first["successCount"] == 2
        second = await ok(
            client,
            "add-tool-annotation",
            {
                "toolRef": {"namespacedName": "ctl.echo"},
                "notes": [{"name": "a", "note": "replaced?"}, {"name": "c", "note": "three"}],
            },
        )
        assert second["successCount"] == 1 and second["skippedCount"] == 1
        assert 'Annotation "a" already exists' in second["warnings"][0]
        notes = (await ok(client, "get-active-toolset"))["toolset"]["toolNotes"][0]["notes"]
        assert notes == [
            {"name": "a", "note": "one"},
            {"name": "b", "note": "two"},
            {"name": "c", "note": "three"},
        ]

        # Past the seed's v1: remove by name.
        removed = await ok(
            client, "remove-tool-annotation", {"toolRef": {"namespacedName": "ctl.echo"}, "names": ["b"]}
        )
        assert removed["removedNotes"] == ["b"]
        text = await refused(
            client, "remove-tool-annotation", {"toolRef": {"namespacedName": "ctl.echo"}, "names": ["b"]}
        )
        assert "no note named 'b'" in text
        await ok(client, "exit-configuration-mode")
        echo = next(t for t in (await client.list_tools()).tools if t.name == "ctl__echo")
        assert echo.description.endswith("### Additional Tool Notes\n\n• **a**: one\n• **c**: three")


async def test_toolset_validation_writes_nothing(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    async with menu_client(config, "2026-07-28") as (client, _):
        echo = [{"namespacedName": "ctl.echo"}]
        assert "Invalid toolset name format" in await refused(
            client, "build-toolset", {"name": "Bad_Name", "tools": echo}
        )
        short = await refused(client, "build-toolset", {"name": "a", "tools": echo})
        assert short == "Toolset name must be between 2 and 50 characters"
        assert "should be non-empty" in await refused(client, "build-toolset", {"name": "empty", "tools": []})
        text = await refused(
            client, "build-toolset", {"name": "mixed", "tools": [*echo, {"namespacedName": "ctl.missing"}]}
        )
        assert "tools[1]: Tool not found: ctl.missing" in text
        available = await ok(client, "list-available-tools")
        pid = next(
            t for s in available["toolsByServer"] for t in s["tools"] if t["namespacedName"] == "ctl.pid"
        )
        conflict = await refused(
            client,
            "build-toolset",
            {"name": "conflict", "tools": [{"namespacedName": "ctl.echo", "refId": pid["refId"]}]},
        )
        assert "Tool reference conflict" in conflict
        assert await saved_names(client) == []
        await ok(client, "build-toolset", {"name": "kept", "tools": echo})
        text = await refused(
            client, "build-toolset", {"name": "kept", "tools": [{"namespacedName": "ctl.pid"}]}
        )
        assert (
            text
            == 'Toolset "kept" already exists. Use a different name or delete the existing toolset first.'
        )
        assert "not found" in await refused(client, "equip-toolset", {"name": "nope"})
        assert "confirm" in await refused(client, "delete-toolset", {"name": "kept"})
        assert await saved_names(client) == ["kept"]
        shown = (await ok(client, "list-saved-toolsets"))["toolsets"][0]["tools"]
        assert [t["namespacedName"] for t in shown] == ["ctl.echo"]  # the failed rebuild changed nothing
        empty = await refused(client, "import-toolset", {"toolset": {"name": "imp", "tools": []}})
        assert "Toolset must include at least one tool" in empty
        bad_import = await refused(
            client, "import-toolset", {"toolset": {"name": "imp", "tools": [{"x": 1}]}}
        )
        assert "tools[0]" in bad_import
        assert await saved_names(client) == ["kept"]
        await ok(client, "delete-toolset", {"name": "kept", "confirm": True})
        assert await saved_names(client) == []


async def test_export_import_round_trip(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    async with menu_client(config, "legacy") as (client, _):
        await ok(
            client,
            "build-toolset",
            {
                "name": "shared",
                "description": "d",
                "tools": [{"namespacedName": "ctl.echo"}],
                "autoEquip": True,
            },
        )
        await ok(client, "enter-configuration-mode")
        await ok(
            client,
            "add-tool-annotation",
            {"toolRef": {"namespacedName": "ctl.echo"}, "notes": [{"name": "n", "note": "t"}]},
        )
        exported = await ok(client, "export-toolset", {"name": "shared"})
        assert exported["format"] == "toolkeeper.toolset/1"
        assert exported["toolNotes"][0]["notes"] == [{"name": "n", "note": "t"}]
        imported = await ok(client, "import-toolset", {"toolset": exported, "name": "shared-copy"})
        assert imported["toolCount"] == 1 and imported["noteCount"] == 1
        assert "already exists" in await refused(client, "import-toolset", {"toolset": exported})
        copy = await ok(client, "export-toolset", {"name": "shared-copy"})
        assert copy["tools"] == exported["tools"] and copy["toolNotes"] == exported["toolNotes"]
        # Equip the copy: its notes show in the listing.
        await ok(client, "equip-toolset", {"name": "shared-copy"})
        echo = next(t for t in (await client.list_tools()).tools if t.name == "ctl__echo")
        assert echo.description.endswith("• **n**: t")


async def test_menu_flag_off_lists_everything_together(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    env = {"TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "false"}
    async with menu_client(config, "legacy", env=env) as (client, changes):
        listed = await names(client)
        config_tools = [n for n in CONFIG_TOOLS if n != "exit-configuration-mode"]
        assert listed[: len(config_tools)] == config_tools
        assert "ctl__echo" in listed and "notes__create_note" in listed
        assert "enter-configuration-mode" not in listed and "exit-configuration-mode" not in listed
        with pytest.raises(MCPError) as off:
            await client.call_tool("enter-configuration-mode", {})
        assert "enableConfigToolsMenu=false" in off.value.error.message
        before = changes.count
        await ok(
            client,
            "build-toolset",
            {"name": "small", "tools": [{"namespacedName": "ctl.echo"}], "autoEquip": True},
        )
        await changes.after(before)
        assert await names(client) == [*config_tools, "ctl__echo"]


async def test_hypertool_env_flag_is_honoured(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    env = {"HYPERTOOL_ENABLE_CONFIG_TOOLS_MENU": "false"}
    params = gateway_params(config, env=env)
    params.env.pop("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU")
    async with Client(params, mode="legacy") as client:
        assert "ctl__echo" in await names(client) and "build-toolset" in await names(client)


async def test_two_clients_annotating_at_once_lose_nothing(tmp_path: Path) -> None:
    """Two gateway processes on one store, each client adding notes to the same tool at once."""
    config = two_servers(tmp_path)
    async with menu_client(config, "legacy") as (first, _):
        await ok(
            first,
            "build-toolset",
            {"name": "busy", "tools": [{"namespacedName": "ctl.echo"}], "autoEquip": True},
        )
        await ok(first, "enter-configuration-mode")
        async with menu_client(config, "2026-07-28") as (second, _):
            await ok(second, "enter-configuration-mode")

            async def annotate(client: Client, who: str) -> None:
                for i in range(8):
                    note = [{"name": f"{who}-{i}", "note": who}, {"name": "shared", "note": who}]
                    await ok(
                        client,
                        "add-tool-annotation",
                        {"toolRef": {"namespacedName": "ctl.echo"}, "notes": note},
                    )

            async with anyio.create_task_group() as tg:
                tg.start_soon(annotate, first, "a")
                tg.start_soon(annotate, second, "b")
            notes = (await ok(second, "get-active-toolset"))["toolset"]["toolNotes"][0]["notes"]
        names_ = sorted(n["name"] for n in notes)
        assert names_ == sorted([f"a-{i}" for i in range(8)] + [f"b-{i}" for i in range(8)] + ["shared"])


async def test_changed_and_unavailable_tools_stay_in_the_toolset(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    async with menu_client(config, "legacy") as (client, _):
        await ok(
            client,
            "build-toolset",
            {
                "name": "pinned",
                "tools": [{"namespacedName": "ctl.echo"}, {"namespacedName": "notes.search_notes"}],
                "autoEquip": True,
            },
        )
        await ok(client, "enter-configuration-mode")
        await ok(
            client,
            "add-tool-annotation",
            {"toolRef": {"namespacedName": "ctl.echo"}, "notes": [{"name": "keep", "note": "me"}]},
        )
    # The echo tool's schema changes (new refId) and the notes server disappears from the config.
    changed = write_config(tmp_path, {"ctl": controllable(server_args={"echo-variant": "loud"})})
    async with menu_client(changed, "legacy") as (client, _):
        echo = next(t for t in (await client.list_tools()).tools if t.name == "ctl__echo")
        assert echo.description.endswith("• **keep**: me")  # notes follow the name across the change
        assert (await client.call_tool("ctl__echo", {"text": "still"})).content[0].text == "still"
        await ok(client, "enter-configuration-mode")
        active = await ok(client, "get-active-toolset")
        assert active["changedTools"] == ["ctl.echo"]
        assert active["unavailableTools"] == ["notes.search_notes"]
        statuses = {t["namespacedName"]: t["status"] for t in active["toolset"]["tools"]}
        assert statuses == {"ctl.echo": "changed", "notes.search_notes": "unavailable"}
