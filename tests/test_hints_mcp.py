"""Behaviour hints through a real MCP client, both eras: passthrough (tri-state, re-sync, invalid
values), pins from the configuration tool, trust, sanitizing and applied inference."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from pydantic import TypeAdapter

from tests.conftest import MODES, controllable, eventually, gateway_params, write_config
from tests.test_toolsets_mcp import menu_client, ok, refused, two_servers

pytestmark = pytest.mark.anyio
RAW = TypeAdapter(dict[str, Any])


async def raw_tools(client: Client) -> dict[str, dict[str, Any]]:
    """tools/list as JSON, so an absent field and a false one stay apart."""
    page = await client.session.send_request(
        types.ListToolsRequest(params=types.PaginatedRequestParams()), RAW
    )
    return {tool["name"]: tool for tool in page["tools"]}


@asynccontextmanager
async def logged_client(config: Path, mode: str, log: Path) -> AsyncIterator[Client]:
    with log.open("w") as errlog:
        async with Client(stdio_client(gateway_params(config), errlog=errlog), mode=mode) as client:
            yield client


@pytest.mark.parametrize("mode", MODES)
async def test_passthrough_is_exact_resyncs_and_drops_invalid_values(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    log = tmp_path / "gateway.log"
    async with logged_client(config, mode, log) as client:
        tools = await raw_tools(client)
        assert tools["ctl__echo"]["annotations"] == {"readOnlyHint": True, "openWorldHint": False}
        assert tools["ctl__echo"]["title"] == "Echo"
        assert "annotations" not in tools["ctl__crash"] and "title" not in tools["ctl__crash"]

        # The server changes its hints: the gateway follows on the next listing.
        hints = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}
        await client.call_tool("ctl__set_hints", {"annotations": hints})

        async def echo_hints() -> Any:
            annotations = (await raw_tools(client))["ctl__echo"].get("annotations")
            return annotations if annotations != {"readOnlyHint": True, "openWorldHint": False} else None

        assert await eventually(echo_hints) == hints

        # Values the spec forbids are treated as absent, with a warning naming server and tool.
        await client.call_tool(
            "ctl__set_hints", {"annotations": {"readOnlyHint": "yes", "destructiveHint": False}}
        )
        assert await eventually(lambda: _annotations_equal(client, {"destructiveHint": False}), timeout=10), (
            "the invalid readOnlyHint should be dropped"
        )
        assert (await client.call_tool("ctl__echo", {"text": "still works"})).content[0].text == "still works"
    assert (
        "server 'ctl', tool 'echo': readOnlyHint is 'yes', not true or false; treated as absent"
        in log.read_text()
    )


async def _annotations_equal(client: Client, expected: dict[str, Any]) -> bool:
    return (await raw_tools(client))["ctl__echo"].get("annotations") == expected


@pytest.mark.parametrize("mode", MODES)
async def test_pins_from_the_configuration_tool(tmp_path: Path, mode: str) -> None:
    config = two_servers(tmp_path)
    async with menu_client(config, mode) as (client, changes):
        await ok(
            client,
            "build-toolset",
            {
                "name": "daily",
                "tools": [{"namespacedName": "notes.update_note"}, {"namespacedName": "ctl.echo"}],
                "autoEquip": True,
            },
        )
        listed = await raw_tools(client)
        assert (
            listed["notes__update_note"]["annotations"]["readOnlyHint"] is True
        )  # as the server misdeclares it

        await ok(client, "enter-configuration-mode")
        available = await ok(client, "list-available-tools")
        by_name = {t["namespacedName"]: t for s in available["toolsByServer"] for t in s["tools"]}
        assert by_name["notes.update_note"]["hints"]["readOnlyHint"] == {
            "value": True,
            "source": "declared-untrusted",
        }
        assert by_name["notes.append_to_note"]["hints"]["title"] == {
            "value": None,
            "source": "default",
            "suggested": "Append to Note",
        }
        assert by_name["ctl.echo"]["hints"]["openWorldHint"] == {"value": False, "source": "declared"}

        # Bad input: a clear refusal, nothing stored.
        assert "Tool not found: notes.nope" in await refused(
            client,
            "set-tool-hints",
            {"toolRef": {"namespacedName": "notes.nope"}, "hints": {"readOnlyHint": False}},
        )
        for hints, says in (
            ({"bogus": True}, "bogus"),
            ({"readOnlyHint": "yes"}, "readOnlyHint"),
            ({"title": "x" * 201}, "title"),
        ):
            text = await refused(
                client, "set-tool-hints", {"toolRef": {"namespacedName": "notes.update_note"}, "hints": hints}
            )
            assert says in text, text
        text = await refused(
            client,
            "set-tool-hints",
            {"toolRef": {"namespacedName": "notes.update_note"}, "parameters": {"nope": "x"}},
        )
        assert "no parameter 'nope'" in text and "etag" in text
        unchanged = await ok(client, "list-available-tools")
        assert unchanged == available

        result = await ok(
            client,
            "set-tool-hints",
            {
                "toolRef": {"namespacedName": "notes.update_note"},
                "hints": {"readOnlyHint": False, "destructiveHint": True},
                "parameters": {"etag": "The etag get_note returned; a stale one fails"},
            },
        )
        assert result["pinned"] == {
            "readOnlyHint": False,
            "destructiveHint": True,
            "param:etag": "The etag get_note returned; a stale one fails",
        }
        assert result["hints"]["fields"]["readOnlyHint"]["source"] == "pinned"
        accepted = await ok(
            client,
            "set-tool-hints",
            {
                "toolRef": {"namespacedName": "ctl.echo"},
                "hints": {"title": "Echo (daily)"},
                "toolset": "daily",
            },
        )
        assert accepted["scope"] == "toolset 'daily'"

        before = changes.count
        await ok(client, "exit-configuration-mode")
        await changes.after(before)
        listed = await raw_tools(client)
        update = listed["notes__update_note"]
        assert update["annotations"] == {
            "readOnlyHint": False,
            "destructiveHint": True,
            "idempotentHint": False,
            "openWorldHint": False,
        }
        assert update["inputSchema"]["properties"]["etag"]["description"].startswith("The etag get_note")
        assert listed["ctl__echo"]["title"] == "Echo (daily)"  # the toolset's pin, while it is equipped

        # A model may only make a tool look riskier: pinning a value that could spare a question,
        # or clearing a cautious pin, is a person's to do; nothing is written.
        await ok(client, "enter-configuration-mode")
        update = {"namespacedName": "notes.update_note"}
        for hints in ({"readOnlyHint": None}, {"destructiveHint": False}, {"idempotentHint": True}):
            text = await refused(client, "set-tool-hints", {"toolRef": update, "hints": hints})
            assert "needs a person" in text and "cautious value" in text, text
        text = await refused(
            client,
            "set-tool-hints",
            {"toolRef": {"namespacedName": "notes.append_to_note"}, "accept": ["all"]},
        )
        assert "destructiveHint=false" in text, text
        # Clearing a pin (null) inherits the declared value again; accepting pins a suggestion.
        cleared = await ok(client, "set-tool-hints", {"toolRef": update, "parameters": {"etag": None}})
        assert cleared["cleared"] == ["param:etag"]
        assert cleared["hints"]["fields"]["readOnlyHint"]["source"] == "pinned"
        accepted = await ok(
            client,
            "set-tool-hints",
            {
                "toolRef": {"namespacedName": "notes.append_to_note"},
                "accept": ["title", "readOnlyHint", "idempotentHint"],
            },
        )
        assert accepted["pinned"] == {
            "title": "Append to Note",
            "readOnlyHint": False,
            "idempotentHint": False,
        }


async def test_trust_sanitize_and_applied_inference_on_the_wire(tmp_path: Path) -> None:
    def notes(name: str, **options: Any) -> dict[str, Any]:
        args = ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / f"{name}.db")]
        return {"command": sys.executable, "args": args, **options}

    config = write_config(
        tmp_path,
        {
            "shady": notes("shady", sanitizeUntrustedHints=True),
            "mine": notes("mine", trust="trusted", inferHints="apply"),
        },
    )
    async with Client(gateway_params(config), mode="legacy") as client:
        tools = await raw_tools(client)
    # An untrusted claim of safety, sanitized: clients see the conservative value.
    assert tools["shady__search_notes"]["annotations"] == {"readOnlyHint": False, "openWorldHint": False}
    assert tools["shady__create_note"]["annotations"]["destructiveHint"] is True
    # The same server trusted: its claims pass unchanged; its gaps are filled by inference.
    assert tools["mine__search_notes"]["annotations"] == {"readOnlyHint": True, "openWorldHint": False}
    assert tools["mine__list_categories"]["annotations"] == {"readOnlyHint": True}
    assert tools["mine__list_categories"]["title"] == "List Categories"
    assert "annotations" not in tools["shady__list_categories"]  # suggestions only, by default
