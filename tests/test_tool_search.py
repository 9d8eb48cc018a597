"""Tool search that equips, never launders (issue 46): `find-tools` through real gateways.

Every gateway here is a real `toolkeeper serve` process with real downstream servers (the
controllable test server, the bundled notes and files demos) and a real SQLite store; clients
are the SDK's, of both eras, over stdio and over HTTP with real client keys. The working set's
rules themselves (order, limit, budget, least recently used) are checked first, on the class.
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
from conftest import MODES, controllable, eventually, gateway_params, write_config
from mcp import Client
from mcp.shared.exceptions import MCPError
from sqlalchemy import text
from test_approval import Person, says
from test_auth import client_with, gateway, new_key, tk, url_of
from test_store import store_url  # noqa: F401 - the fixture: SQLite and PostgreSQL

from toolkeeper.downstreams.connection import ToolResolution, send_unvalidated
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, Principal
from toolkeeper.runtime.working_sets import BUDGET, LIMIT, Caller, Limits, WorkingSet, WorkingSets
from toolkeeper.store import Store
from toolkeeper.store import toolsets as toolset_rows

pytestmark = pytest.mark.anyio

FIND = "find-tools"
ENTER = "enter-configuration-mode"
# What the local user (an admin) is listed first in normal mode with tool search on.
OWN = [FIND, ENTER]
MODERN = "2026-07-28"
SEARCH_ON = {"TOOLKEEPER_DISCOVERY": "search"}


@pytest.fixture(autouse=True)
def _menu_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # As the gateway ships: normal mode lists the way into configuration mode beside the tools.
    monkeypatch.setenv("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "true")


# -- the working set's rules ---------------------------------------------------------------


def costs(**tokens: int) -> Any:
    return lambda name: tokens.get(name)


def test_found_tools_are_appended_in_order_and_the_least_recently_used_go_first() -> None:
    working_set = WorkingSet()
    cost = costs(a=10, b=10, c=10, d=10)
    limits = Limits(max_tools=3, max_tokens=1000)
    assert working_set.equip([("a", 10), ("b", 10)], cost, limits).added == ("a", "b")
    working_set.touch("a")  # called: now more recent than b
    equipped = working_set.equip([("c", 10), ("d", 10)], cost, limits)
    assert equipped.added == ("c", "d") and equipped.evicted == (("b", LIMIT),)
    assert working_set.names == ["a", "c", "d"]  # never reordered: a keeps its place
    # Found again: kept where it is, most recently used, nothing changes in the list.
    again = working_set.equip([("a", 10)], cost, limits)
    assert again.kept == ("a",) and not again.changed and working_set.names == ["a", "c", "d"]


def test_the_budget_evicts_and_a_tool_over_it_alone_is_not_added() -> None:
    working_set = WorkingSet()
    cost = costs(small=40, mid=70, huge=500)
    limits = Limits(max_tools=10, max_tokens=100)
    working_set.equip([("small", 40)], cost, limits)
    equipped = working_set.equip([("mid", 70), ("huge", 500)], cost, limits)
    assert equipped.added == ("mid",) and equipped.evicted == (("small", BUDGET),)
    assert [name for name, _ in equipped.refused] == ["huge"]
    assert "its definition alone is ~500 tokens" in equipped.refused[0][1]
    assert working_set.names == ["mid"]


def test_a_search_that_finds_more_than_fits_adds_its_best_and_says_why_not_the_rest() -> None:
    working_set = WorkingSet()
    cost = costs(a=1, b=1, c=1)
    equipped = working_set.equip([("a", 1), ("b", 1), ("c", 1)], cost, Limits(max_tools=2, max_tokens=100))
    assert equipped.added == ("a", "b") and equipped.evicted == ()
    assert equipped.refused == (("c", "no room: the working set holds at most 2 tools"),)


def test_a_tool_gone_from_what_the_caller_may_see_drops_out_silently() -> None:
    working_set = WorkingSet([("gone", 1.0), ("kept", 2.0)])
    equipped = working_set.equip([("new", 5)], costs(kept=5, new=5), Limits(10, 100))
    assert equipped.added == ("new",) and equipped.evicted == ()
    assert working_set.names == ["kept", "new"]


async def test_a_store_of_0008_gains_tool_search_and_keeps_working_sets(store_url: str) -> None:  # noqa: F811
    old = await Store(store_url).open(up_to="0008")
    async with old, old.write() as conn:
        await conn.execute(
            text(
                "INSERT INTO toolsets (id, name, description, created_at, updated_at) "
                "VALUES (1, 'kept', '', '2026-11-20 10:00:00+00', '2026-11-20 10:00:00+00')"
            )
        )
    async with Store(store_url) as store:
        async with store.read() as conn:
            kept = await toolset_rows.load(conn, "kept")
        assert kept is not None and kept.discovery == "off"  # lists what it always listed
        alice = Caller("alice", kept=True)
        working_sets = WorkingSets(store)
        working_set = await working_sets.for_search(alice, None)
        working_set.equip([("b", 1), ("a", 1)], costs(a=1, b=1), Limits(10, 100))
        start = await store.revision()
        await working_sets.save(alice, working_set)
        assert await store.revision() == start  # nothing for running gateways to reload
        again = await WorkingSets(store).of(alice)
        assert again is not None and again.names == ["b", "a"]  # in the order added
        assert await WorkingSets(store).of(Caller("bob", kept=True)) is not None
        # A session's is never written.
        session = Caller("stdio:x", kept=False)
        await working_sets.save(session, await working_sets.for_search(session, None))
        async with store.read() as conn:
            principals = (await conn.execute(text("SELECT DISTINCT principal FROM working_sets"))).scalars()
            assert list(principals) == ["alice"]


def test_a_key_named_like_the_local_user_has_a_working_set_of_its_own() -> None:
    # Key names may be "local" or "anonymous": a working set (and a listen stream) is a
    # principal's by kind and name, so such a key never shares the local user's.
    key = Principal("local", "key")
    session = ClientIdentity("c", "1", "http:local@x", key, True)
    local = ClientIdentity("c", "1", "http:x", LOCAL_USER, True)
    assert Caller.of(session, modern=True) != Caller.of(local, modern=True)
    assert Caller.of(session, modern=False) == Caller("http:local@x", kept=False)


# -- through a real gateway -------------------------------------------------------------------


def notes_entry(tmp_path: Path) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "toolkeeper.demo.notes", "--db", str(tmp_path / "n.db")],
    }


def files_entry(tmp_path: Path) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "toolkeeper.demo.files", "--root", str(tmp_path / "files")],
        "trust": "trusted",
    }


def ctl_and_notes(tmp_path: Path, **settings: Any) -> Path:
    return write_config(tmp_path, {"ctl": controllable(), "notes": notes_entry(tmp_path)}, **settings)


class Listener:
    """A client whose tools/list_changed notifications are counted: on its session (handshake
    era) or on a listen stream (2026-07-28)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.changes = 0

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.changes += 1

    async def names(self) -> list[str]:
        return [tool.name for tool in (await self.client.list_tools()).tools]

    async def find(self, query: str, limit: int | None = None) -> dict[str, Any]:
        arguments: dict[str, Any] = {"query": query}
        if limit is not None:
            arguments["limit"] = limit
        result = await self.client.call_tool(FIND, arguments)
        assert not result.is_error, result.content
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    async def refused(self, arguments: dict[str, Any]) -> str:
        result = await self.client.call_tool(FIND, arguments)
        assert result.is_error, result
        text = result.content[0].text  # type: ignore[union-attr]
        return str(text)


@asynccontextmanager
async def listening(client_of: Any, mode: str, **options: Any) -> AsyncIterator[Listener]:
    """A client made by `client_of(mode, message_handler=..., **options)`, with a listen stream in
    the 2026-07-28 era."""
    holder: dict[str, Listener] = {}

    async def on_message(message: Any) -> None:
        # A 2026-07-28 client's handler sees its listen stream's events too: counted there.
        if "listener" in holder and mode != MODERN:
            await holder["listener"].on_message(message)

    async with client_of(mode, message_handler=on_message, **options) as client:
        listener = holder["listener"] = Listener(client)
        if mode != MODERN:
            yield listener
            return
        async with client.listen(tools_list_changed=True) as subscription:

            async def count() -> None:
                async for _event in subscription:
                    listener.changes += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(count)
                yield listener
                tg.cancel_scope.cancel()


def over_stdio(config: Path, env: dict[str, str] | None = None) -> Any:
    def client_of(mode: str, **options: Any) -> Client:
        return Client(gateway_params(config, env={**SEARCH_ON, **(env or {})}), mode=mode, **options)

    return client_of


@pytest.mark.parametrize("mode", MODES)
async def test_find_equips_the_real_tool_with_its_hints_and_a_destructive_one_still_asks(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)  # the default confirm settings
    config = write_config(tmp_path, {"files": files_entry(tmp_path)})
    person = Person(says("once"))
    client_of = over_stdio(config)
    async with listening(
        client_of, mode, elicitation_callback=person, extensions=[ToolResolution()]
    ) as caller:
        client = caller.client
        assert await caller.names() == OWN  # nothing equipped: search alone
        find = (await client.list_tools()).tools[0]
        assert find.annotations is not None and find.annotations.read_only_hint is True
        assert find.annotations.destructive_hint is False and find.annotations.open_world_hint is False

        found = await caller.find("delete a file")
        assert found["matches"][0]["name"] == "files__manage_files"
        assert found["equipped"] == ["files__manage_files"] and found["toolListChanged"] is True
        assert found["matches"][0]["tokens"] > 0 and found["encoding"] == "o200k_base"
        await eventually(lambda: caller.changes >= 1)

        # The real tool, as the server declared it: its name, its schema, its hints, flagged
        # resolvable, and tools/resolve answers for it.
        tools = {
            tool["name"]: tool for tool in (await send_unvalidated(client, "tools/list", {}, 15))["tools"]
        }
        assert list(tools) == [*OWN, "files__manage_files"]
        manage = tools["files__manage_files"]
        assert manage["annotations"]["destructiveHint"] is True and manage["dynamicAnnotations"] is True
        assert set(manage["inputSchema"]["properties"]) >= {"path", "action"}
        resolved = await send_unvalidated(
            client,
            "tools/resolve",
            {"name": "files__manage_files", "arguments": {"path": "a", "action": "read"}},
            15,
        )
        assert resolved["annotations"]["readOnlyHint"] is True

        written = await client.call_tool(
            "files__manage_files", {"path": "a.txt", "action": "replace", "content": "hello"}
        )
        assert not written.is_error, written
        asked = len(person.questions)
        person.answers = [types.ElicitResult(action="decline")]
        deleted = await client.call_tool("files__manage_files", {"path": "a.txt", "action": "delete"})
        assert deleted.is_error and "was not run" in deleted.content[0].text  # type: ignore[union-attr]
        assert len(person.questions) == asked + 1 and '"delete"' in person.questions[-1].message
        assert (tmp_path / "files" / "a.txt").read_text() == "hello"
        if mode == MODERN:
            listed = await client.list_tools()
            assert listed.ttl_ms == 0 and listed.cache_scope == "private"  # a caching client refetches


@pytest.mark.parametrize("mode", MODES)
async def test_bad_input_is_refused_with_what_a_query_must_be(tmp_path: Path, mode: str) -> None:
    config = ctl_and_notes(tmp_path)
    async with listening(over_stdio(config), mode) as caller:
        for arguments, words in (
            ({"query": ""}, "The search query is empty"),
            ({"query": "   "}, "The search query is empty"),
            ({}, "The search query is empty"),
            ({"query": 42}, "The search query is empty"),
            ({"query": "x" * 501}, "501 characters long; at most 500"),
            ({"query": "note", "limit": 0}, "limit must be a whole number from 1 to 20, got 0"),
            ({"query": "note", "limit": 21}, "got 21"),
            ({"query": "note", "limit": "5"}, "got '5'"),
            ({"query": "note", "limit": True}, "got True"),
            ({"query": "note", "count": 3}, "'count' is not one of them"),
        ):
            assert words in await caller.refused(arguments), arguments
        nothing = await caller.client.call_tool(FIND, {"query": "xyzzy plugh"})
        assert not nothing.is_error
        text = nothing.content[0].text  # type: ignore[union-attr]
        assert "No tool matches 'xyzzy plugh'" in text and "list-available-tools" in text
        assert nothing.structured_content is not None and nothing.structured_content["matches"] == []
        assert await caller.names() == OWN and caller.changes == 0


@pytest.mark.parametrize("mode", MODES)
async def test_the_limit_evicts_the_least_recently_used_and_the_answer_says_so(
    tmp_path: Path, mode: str
) -> None:
    config = ctl_and_notes(tmp_path, workingSetMaxTools=2)
    async with listening(over_stdio(config), mode) as caller:
        assert (await caller.find("echo the text back", 1))["equipped"] == ["ctl__echo"]
        assert (await caller.find("create a new note", 1))["equipped"] == ["notes__create_note"]
        await caller.client.call_tool("ctl__echo", {"text": "used"})  # called: the echo is recent
        found = await caller.find("delete a note permanently", 1)
        assert found["equipped"] == ["notes__delete_note"]
        assert found["evicted"] == [{"name": "notes__create_note", "reason": "limit"}]
        assert await caller.names() == [*OWN, "ctl__echo", "notes__delete_note"]  # appended, in order
        text = (await caller.client.call_tool(FIND, {"query": "create a new note", "limit": 1})).content[0]
        assert "Removed from your tool list to make room, least recently used first: ctl__echo" in text.text  # type: ignore[union-attr]
        assert "at most 2 tools" in text.text  # type: ignore[union-attr]
        assert await caller.names() == [*OWN, "notes__delete_note", "notes__create_note"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_token_budget_evicts_and_refuses_a_tool_over_it_alone(tmp_path: Path, mode: str) -> None:
    config = ctl_and_notes(tmp_path, workingSetMaxTokens=200)
    async with listening(over_stdio(config), mode) as caller:
        first = await caller.find("delete a note permanently", 1)
        second = await caller.find("echo the text back", 1)
        small, other = first["matches"][0], second["matches"][0]
        assert small["tokens"] <= 200 and other["tokens"] <= 200 < small["tokens"] + other["tokens"]
        assert second["equipped"] == ["ctl__echo"]
        assert second["evicted"] == [{"name": "notes__delete_note", "reason": "budget"}]
        big = await caller.find("create a new note", 1)
        assert big["matches"][0]["tokens"] > 200 and big["equipped"] == [] and not big["toolListChanged"]
        assert big["notEquipped"][0]["name"] == "notes__create_note"
        assert "its definition alone is" in big["notEquipped"][0]["why"]
        assert await caller.names() == [*OWN, "ctl__echo"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_equipped_toolsets_tools_stay_listed_first_and_are_never_evicted(
    tmp_path: Path, mode: str
) -> None:
    config = ctl_and_notes(tmp_path, workingSetMaxTools=1)
    tk(config, "toolsets", "build", "kit", "ctl.echo", "ctl.pid", "--equip", "--discovery", "search")
    async with listening(over_stdio(config, env={"TOOLKEEPER_DISCOVERY": "off"}), mode) as caller:
        assert await caller.names() == ["ctl__echo", "ctl__pid", *OWN]
        echo = await caller.find("echo the text back", 1)
        assert echo["matches"][0] == {**echo["matches"][0], "name": "ctl__echo", "listed": True}
        assert echo["equipped"] == [] and not echo["toolListChanged"]
        assert (await caller.find("create a new note", 1))["equipped"] == ["notes__create_note"]
        swapped = await caller.find("delete a note permanently", 1)
        assert swapped["evicted"] == [{"name": "notes__create_note", "reason": "limit"}]
        assert await caller.names() == ["ctl__echo", "ctl__pid", *OWN, "notes__delete_note"]
        # A client that never lists again calls what it found, and what it found before, by name.
        got = await caller.client.call_tool("notes__create_note", {"title": "t", "content": "c"})
        assert not got.is_error, got
    # Off for the toolset: its tools alone, nothing found is routed.
    tk(config, "toolsets", "discovery", "kit", "off")
    async with listening(over_stdio(config), mode) as caller:
        assert await caller.names() == ["ctl__echo", "ctl__pid", ENTER]
        with pytest.raises(MCPError) as unknown:
            await caller.client.call_tool("notes__delete_note", {"note_id": 1})
        assert "is not in the equipped toolset 'kit'" in unknown.value.error.message


async def test_a_principals_working_set_outlives_its_connection_and_the_gateway(tmp_path: Path) -> None:
    config = ctl_and_notes(tmp_path)
    async with listening(over_stdio(config), MODERN) as caller:
        await caller.find("create a new note", 1)
        await caller.find("echo the text back", 1)
        assert await caller.names() == [*OWN, "notes__create_note", "ctl__echo"]
    # Another gateway process on the same store: the local user's working set is there at once.
    async with listening(over_stdio(config), MODERN) as caller:
        assert await caller.names() == [*OWN, "notes__create_note", "ctl__echo"]
    # A handshake-era session's is its own, and starts empty.
    async with listening(over_stdio(config), "legacy") as caller:
        assert await caller.names() == OWN


# -- two callers at once, over HTTP ------------------------------------------------------------


def over_http(url: str, token: str | None) -> Any:
    def client_of(mode: str, **options: Any) -> Any:
        return client_with(url, token, mode, **options)

    return client_of


async def test_two_principals_have_their_own_working_sets_and_hear_only_their_own_changes(
    tmp_path: Path,
) -> None:
    config = ctl_and_notes(tmp_path, discovery="search", http={"allowedHosts": ["gateway.example.com"]})
    alice, bob = new_key(config, "alice"), new_key(config, "bob")
    with gateway(config) as running:
        url = url_of(running)
        async with (
            listening(over_http(url, alice), MODERN) as a,
            listening(over_http(url, bob), MODERN) as b,
        ):
            assert await a.names() == await b.names() == [FIND]
            await a.find("create a new note", 1)
            await eventually(lambda: a.changes >= 1)
            await b.find("echo the text back", 1)
            await eventually(lambda: b.changes >= 1)
            assert await a.names() == [FIND, "notes__create_note"]
            assert await b.names() == [FIND, "ctl__echo"]
            await anyio.sleep(0.3)  # what was sent to one is not on its way to the other
            assert (a.changes, b.changes) == (1, 1)


async def test_two_sessions_have_their_own_working_sets_and_hear_only_their_own_changes(
    tmp_path: Path,
) -> None:
    config = ctl_and_notes(tmp_path, discovery="search")
    with gateway(config) as running:
        url = url_of(running)
        async with (
            listening(over_http(url, None), "legacy") as a,
            listening(over_http(url, None), "legacy") as b,
        ):
            await a.find("create a new note", 1)
            await eventually(lambda: a.changes >= 1)
            await b.find("echo the text back", 1)
            await eventually(lambda: b.changes >= 1)
            assert await a.names() == [*OWN, "notes__create_note"]
            assert await b.names() == [*OWN, "ctl__echo"]
            await anyio.sleep(0.3)
            assert (a.changes, b.changes) == (1, 1)


@pytest.mark.parametrize("mode", MODES)
async def test_a_scoped_key_finds_only_its_scope_and_nothing_hints_at_the_rest(
    tmp_path: Path, mode: str
) -> None:
    config = ctl_and_notes(tmp_path, discovery="search", http={"allowedHosts": ["gateway.example.com"]})
    tk(config, "toolsets", "build", "dev", "ctl.pid", "--discovery", "search")
    tk(config, "toolsets", "build", "plain", "ctl.echo")
    notes_only = new_key(config, "notes-only", "--server", "notes")
    dev = new_key(config, "dev-only", "--toolset", "dev")
    # A toolset without search: its tools and every tool of its servers listed, as always.
    mixed = new_key(config, "mixed", "--toolset", "plain", "--server", "notes")
    with gateway(config) as running:
        url = url_of(running)
        async with listening(over_http(url, notes_only), mode) as caller:
            assert await caller.names() == [FIND]  # a scope of servers: searchable, not listed
            nothing = await caller.client.call_tool(FIND, {"query": "echo"})
            text = nothing.content[0].text  # type: ignore[union-attr]
            assert "No tool matches 'echo'" in text and "ctl" not in text
            with pytest.raises(MCPError) as refused:
                await caller.client.call_tool("ctl__echo", {"text": "x"})
            assert "Unknown tool" in refused.value.error.message
            assert (await caller.find("create a new note", 1))["equipped"] == ["notes__create_note"]
        async with listening(over_http(url, dev), mode) as caller:
            assert await caller.names() == ["ctl__pid", FIND]
            found = await caller.find("process id")
            assert [match["name"] for match in found["matches"]] == ["ctl__pid"]
            assert found["equipped"] == []
            assert (await caller.client.call_tool(FIND, {"query": "note"})).structured_content == {
                "query": "note",
                "matches": [],
                "encoding": "o200k_base",
                "equipped": [],
                "evicted": [],
                "notEquipped": [],
                "toolListChanged": False,
            }
        async with listening(over_http(url, mixed), mode) as caller:
            listed = await caller.names()
            assert listed[0] == "ctl__echo" and FIND not in listed
            assert {"notes__create_note", "notes__delete_note", "notes__search_notes"} <= set(listed)


# -- the demo --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_demo_a_client_with_only_find_tools_writes_a_note(tmp_path: Path, mode: str) -> None:
    """The issue's acceptance: the bundled demo with tool search on, as it ships (configuration
    mode's menu on), a real client that starts without the notes tools."""
    env = {
        **SEARCH_ON,
        "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "true",
        "TOOLKEEPER_DEMO_DIR": str(tmp_path / "demo"),
    }
    params = gateway_params(tmp_path / "unused.json", env=env)
    params.args = ["-m", "toolkeeper", "serve", "--demo"]

    def client_of(mode: str, **options: Any) -> Client:
        return Client(params, mode=mode, **options)

    async with listening(client_of, mode) as caller:
        assert await caller.names() == OWN
        found = await caller.find("write a note")
        assert "notes__create_note" in found["equipped"]
        await eventually(lambda: caller.changes >= 1)
        assert "notes__create_note" in await caller.names()
        created = await caller.client.call_tool(
            "notes__create_note", {"title": "Groceries", "content": "- milk", "category": "home"}
        )
        assert not created.is_error, created
        assert json.loads(created.content[0].text)["title"] == "Groceries"  # type: ignore[union-attr]


# -- the setting's faces -----------------------------------------------------------------------


def test_toolsets_discovery_from_the_command_line(tmp_path: Path) -> None:
    config = ctl_and_notes(tmp_path)
    tk(config, "toolsets", "build", "kit", "ctl.echo", "--discovery", "search")
    shown = json.loads(tk(config, "toolsets", "show", "kit", "--json", "--offline").stdout)
    assert shown["discovery"] == "search"
    assert "kit, with tool search" in tk(config, "toolsets", "show", "kit", "--offline").stdout
    wrong = tk(config, "toolsets", "discovery", "kit", "maybe", ok=False)
    assert (
        wrong.returncode == 1 and "must be one of search, off" in wrong.stderr and "'maybe'" in wrong.stderr
    )
    unknown = tk(config, "toolsets", "discovery", "nope", "off", ok=False)
    assert unknown.returncode == 1 and 'Toolset "nope" not found' in unknown.stderr
    off = tk(config, "toolsets", "discovery", "kit", "off").stdout
    assert 'Tool search for toolset "kit" is off.' in off
    assert "Nothing changed" in tk(config, "toolsets", "discovery", "kit", "off").stdout
    # An export carries it, and an import brings it back.
    tk(config, "toolsets", "discovery", "kit", "search")
    exported = tmp_path / "kit.json"
    tk(config, "toolsets", "export", "kit", "-o", str(exported))
    assert json.loads(exported.read_text())["discovery"] == "search"
    tk(config, "toolsets", "import", str(exported), "--name", "kit-copy")
    copy = json.loads(tk(config, "toolsets", "show", "kit-copy", "--json", "--offline").stdout)
    assert copy["discovery"] == "search"
    bad = tk(config, "toolsets", "build", "other", "ctl.echo", "--discovery", "on", ok=False)
    assert bad.returncode == 1 and "'on'" in bad.stderr


@pytest.mark.parametrize("mode", MODES)
async def test_the_model_builds_a_toolset_with_tool_search(tmp_path: Path, mode: str) -> None:
    config = ctl_and_notes(tmp_path)
    async with listening(over_stdio(config, env={"TOOLKEEPER_DISCOVERY": "off"}), mode) as caller:
        client = caller.client
        assert FIND not in await caller.names()  # configuration mode: nothing equipped, search off
        built = await client.call_tool(
            "build-toolset",
            {
                "name": "kit",
                "tools": [{"namespacedName": "ctl.echo"}],
                "autoEquip": True,
                "discovery": "search",
            },
        )
        assert not built.is_error, built.content
        assert await caller.names() == ["ctl__echo", *OWN]
        await client.call_tool(ENTER, {})
        with pytest.raises(MCPError) as hidden:  # configuration mode lists what it always did
            await client.call_tool(FIND, {"query": "note"})
        assert (
            "'find-tools' is listed in normal mode. Call exit-configuration-mode"
            in hidden.value.error.message
        )
        refused = await client.call_tool(
            "build-toolset", {"name": "other", "tools": [{"namespacedName": "ctl.echo"}], "discovery": "on"}
        )
        assert refused.is_error
