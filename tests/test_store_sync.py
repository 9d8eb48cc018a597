"""Replicas on one PostgreSQL store hear each other's changes as they commit: the real server at
127.0.0.1:5432 (a schema of each test's own), real gateway processes over HTTP, the real CLI, and
real SDK clients of both eras."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import MODES, controllable, eventually, free_port, spawn_http_gateway, wait_port, write_config
from mcp import Client
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from tcp_proxy import TcpProxy
from test_approval_arguments import a_pending_call
from test_auth import LISTING, LISTING_HEADERS, client_with, new_key, tk, url_of
from test_wire_lanes import HttpGateway

from toolkeeper.config.loader import parse_config_text
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.services import approvals as approval_service
from toolkeeper.services.approvals import Answer, ApprovalService
from toolkeeper.services.keys import KeyService
from toolkeeper.services.reloads import ReloadService
from toolkeeper.store import Store, StoreError
from toolkeeper.store.change_listener import ChangeListener
from toolkeeper.store.change_notices import ALL_TOPICS, MAX_PAYLOAD, ChangeNotice
from toolkeeper.store.tables import working_sets

pytestmark = pytest.mark.anyio
POSTGRES = os.environ.get("TOOLKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
ASYNC_POSTGRES = POSTGRES.replace("postgresql://", "postgresql+asyncpg://", 1)


async def run_sql(statement: str, schema: str | None = None, **values: Any) -> None:
    """SQL past the store (no notice sent): what a lost notice, or another program, leaves."""
    options = {"server_settings": {"search_path": schema}} if schema else {}
    engine = create_async_engine(ASYNC_POSTGRES, connect_args=options)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(statement), values)
    finally:
        await engine.dispose()


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A schema of this test's own in the test database, dropped afterwards."""
    name = f"tk_sync_{uuid.uuid4().hex[:12]}"
    yield name
    await run_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def url_in(schema: str, base: str = POSTGRES) -> str:
    return f"{base}?schema={schema}"


def through(proxy: TcpProxy) -> str:
    """The test database, reached through `proxy`."""
    return POSTGRES.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")


async def write_then_fail(store: Store) -> None:
    async with store.write() as conn:
        await conn.execute(text("DELETE FROM client_keys"))
        raise RuntimeError("changed my mind")


async def first_heard(listener: ChangeListener) -> list[ChangeNotice | None]:
    with anyio.fail_after(20):
        return await listener.heard()


# -- what a write announces -------------------------------------------------------------------


async def test_each_committed_write_announces_its_topics_and_revision_and_a_rolled_back_one_nothing(
    schema: str,
) -> None:
    async with Store(url_in(schema)) as store, ChangeListener.listening(store) as listener:
        start = await listener.revision()
        await KeyService(store).create("alice")
        assert await first_heard(listener) == [ChangeNotice(frozenset({"keys"}), start + 1)]

        # Rolled back: nothing is announced, and the revision stays.
        with pytest.raises(RuntimeError):
            await write_then_fail(store)
        # Written without bumping the revision, of a table no gateway keeps: nothing announced.
        async with store.write(bump_revision=False) as conn:
            await conn.execute(
                working_sets.insert().values(
                    principal="key:alice", exposed_name="ctl__echo", position=0, last_used=datetime.now(UTC)
                )
            )
        # A pending call's row: announced without a revision, for the calls waiting on it.
        approvals = ApprovalService(store)
        await approvals.open(a_pending_call(1))
        assert await first_heard(listener) == [ChangeNotice(frozenset({"approvals"}), None)]

        # SQL the store does not know the table of: everything is read again.
        async with store.write() as conn:
            await conn.execute(text("UPDATE client_keys SET admin = admin"))
        await ReloadService(store).request()
        heard = await first_heard(listener)
        while len(heard) < 2:
            heard += await first_heard(listener)
        assert heard == [
            ChangeNotice(frozenset({ALL_TOPICS}), start + 2),
            ChangeNotice(frozenset({"state"}), start + 3),
        ]


def test_a_notice_too_large_to_send_asks_for_everything_and_a_garbled_one_reads_as_none() -> None:
    huge = ChangeNotice(frozenset(f"topic-{n}" for n in range(2000)), 7)
    assert json.loads(huge.payload()) == {"t": [ALL_TOPICS], "r": 7}
    assert len(ChangeNotice(frozenset({"keys"}), 1).payload()) < MAX_PAYLOAD
    for garbled in ("", "not json", "[]", '{"t": "keys"}', '{"t": ["keys"], "r": "7"}', '{"t": [1]}'):
        assert ChangeNotice.parse(garbled) is None
    assert ChangeNotice.parse('{"t":["keys"],"r":3}') == ChangeNotice(frozenset({"keys"}), 3)


async def test_stores_in_other_schemas_are_not_heard(schema: str) -> None:
    other = f"tk_sync_{uuid.uuid4().hex[:12]}"
    try:
        async with (
            Store(url_in(schema)) as store,
            Store(url_in(other)) as elsewhere,
            ChangeListener.listening(store) as listener,
        ):
            assert store.channel != elsewhere.channel
            await KeyService(elsewhere).create("bob")
            await KeyService(store).create("alice")
            heard = await first_heard(listener)
            assert [notice.topics for notice in heard if notice] == [frozenset({"keys"})]
    finally:
        await run_sql(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


# -- one gateway in this process --------------------------------------------------------------


@asynccontextmanager
async def gateway_on(url: str) -> AsyncIterator[Gateway]:
    """The real gateway in this process on the store at `url`, once it has started, no servers."""
    config = parse_config_text(
        json.dumps({"mcpServers": {}, "toolkeeper": {"confirm": "never"}}), environ={}, kinds=KINDS.entries
    )
    async with Store(url) as store:
        running = Gateway(config, store)
        async with anyio.create_task_group() as tg:
            await tg.start(running.run)
            yield running
            tg.cancel_scope.cancel()


def key_names(running: Gateway) -> set[str]:
    return {key.name for key in running.keys._by_prefix.values()}


async def test_a_garbled_notice_or_a_skipped_revision_makes_the_gateway_read_everything_again(
    schema: str,
) -> None:
    url = url_in(schema)
    async with gateway_on(url) as running, Store(url) as elsewhere:
        await eventually(lambda: running.sync.hearing)
        await KeyService(elsewhere).create("alice")
        await KeyService(elsewhere).create("bob")
        await eventually(lambda: key_names(running) == {"alice", "bob"})

        # Changed past the store (no notice): the gateway does not know yet...
        await run_sql("DELETE FROM client_keys WHERE name = 'alice'", schema)
        await run_sql("UPDATE store_revision SET value = value + 1", schema)
        # ... until a notice it cannot read: it reads everything again.
        await run_sql("SELECT pg_notify(:channel, 'garbled {')", channel=elsewhere.channel)
        await eventually(lambda: key_names(running) == {"bob"})

        # A notice whose revision skips one it never heard: everything again, not only its topic.
        await run_sql("DELETE FROM client_keys WHERE name = 'bob'", schema)
        revision = await elsewhere.revision()
        await run_sql("UPDATE store_revision SET value = value + 2", schema)
        skipped = ChangeNotice(frozenset({"hints"}), revision + 2).payload()
        await run_sql("SELECT pg_notify(:channel, :payload)", channel=elsewhere.channel, payload=skipped)
        await eventually(lambda: key_names(running) == set())
        assert running.sync.revision == revision + 2


async def test_a_decision_written_elsewhere_releases_the_waiting_call_without_its_poll(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Far longer than the test may take: only the notice can release the call in time.
    monkeypatch.setattr(approval_service, "POLL_SECONDS", 3600.0)
    url = url_in(schema)
    async with gateway_on(url) as running, Store(url) as elsewhere:
        approvals = running.services.approvals  # type: ignore[union-attr]
        call = a_pending_call(2)
        await approvals.open(call)
        decided: list[Any] = []

        async def wait() -> None:
            decided.append(await approvals.wait_for_answer(call.id, 600))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await eventually(lambda: approvals.waits == 1)
                await ApprovalService(elsewhere).approve(
                    call.id, Answer.ONCE, by="person via cli", channel="cli"
                )
        assert decided[0] is not None and decided[0].status == "approved"


# -- replicas: gateway processes on one store -------------------------------------------------


class ListChanges:
    """The tool-list changes one client heard, in its era."""

    def __init__(self) -> None:
        self.count = 0

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1


def replica_config(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return write_config(
        folder,
        {"ctl": controllable(trust="trusted")},
        http={"allowedHosts": ["gateway.example.com"]},
    )


class Replica(HttpGateway):
    """A gateway over HTTP named `name` among the replicas, its log in `log`; given the time a
    busy machine needs to start it."""

    def __init__(self, config: Path, name: str, log: Path) -> None:
        self.port = free_port()
        with log.open("wb") as written:
            self.process = spawn_http_gateway(
                config, self.port, env={"TOOLKEEPER_REPLICA": name}, stderr=written
            )
        wait_port(self.port, 120)


@contextmanager
def replicas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> Iterator[list[Replica]]:
    """Gateways `a` and `b` over HTTP on the store at `url`, listening."""
    monkeypatch.setenv("TOOLKEEPER_DATABASE_URL", url)
    monkeypatch.setenv("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "true")
    running: list[Replica] = []
    try:
        for name in ("a", "b"):
            running.append(Replica(replica_config(tmp_path, name), name, tmp_path / f"{name}.log"))
        yield running
    finally:
        for replica in running:
            replica.close()


async def tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def test_a_cli_change_and_a_key_revocation_reach_every_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, schema: str
) -> None:
    monkeypatch.setenv("TOOLKEEPER_DATABASE_URL", url_in(schema))
    cli_config = replica_config(tmp_path, "cli")
    tk(cli_config, "toolsets", "build", "first", "ctl.echo", "--equip")
    alice = new_key(cli_config, "alice", "--admin")
    with replicas(tmp_path, monkeypatch, url_in(schema)) as (first, second):
        heard = [ListChanges(), ListChanges()]
        async with (
            client_with(url_of(first), alice, MODES[0], message_handler=heard[0].on_message) as on_a,
            client_with(url_of(second), alice, MODES[1], message_handler=heard[1].on_message) as on_b,
        ):
            assert "ctl__echo" in await tool_names(on_a) and "ctl__echo" in await tool_names(on_b)
            async with on_b.listen(tools_list_changed=True) as subscription:
                tk(cli_config, "toolsets", "build", "second", "ctl.pid", "--equip")

                async def modern_heard() -> None:
                    async for _event in subscription:
                        heard[1].count += 1
                        return

                with anyio.fail_after(20):
                    await modern_heard()
                await eventually(lambda: heard[0].count >= 1)
            for client in (on_a, on_b):
                names = await tool_names(client)
                assert "ctl__pid" in names and "ctl__echo" not in names

            tk(cli_config, "keys", "revoke", "alice")

            def refused_everywhere() -> bool:
                return all(
                    running.request(LISTING, authorization=f"Bearer {alice}", **LISTING_HEADERS)[0] == 401
                    for running in (first, second)
                )

            assert await eventually(refused_everywhere, timeout=20, interval=0.1)


async def test_an_approval_given_with_the_cli_releases_the_call_waiting_on_a_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, schema: str
) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)  # ctl's pid declares no hints: asked about
    monkeypatch.setenv("TOOLKEEPER_DATABASE_URL", url_in(schema))
    cli_config = replica_config(tmp_path, "cli")
    tk(cli_config, "toolsets", "build", "first", "ctl.pid", "--equip")
    token = new_key(cli_config, "alice")
    with replicas(tmp_path, monkeypatch, url_in(schema)) as (_first, second):
        async with client_with(url_of(second), token, MODES[1]) as client:
            results: list[types.CallToolResult] = []

            async def call() -> None:
                results.append(await client.call_tool("ctl__pid", {}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)

                def waiting() -> list[dict[str, Any]]:
                    listed: list[dict[str, Any]] = json.loads(
                        tk(cli_config, "approvals", "list", "--json").stdout
                    )
                    return listed

                pending = await eventually(
                    lambda: anyio.to_thread.run_sync(waiting), timeout=30, interval=0.2
                )
                await anyio.to_thread.run_sync(tk, cli_config, "approvals", "approve", pending[0]["id"])
            assert not results[0].is_error


# -- PostgreSQL going away --------------------------------------------------------------------


async def test_the_connection_cut_and_restored_calls_go_on_and_changes_made_meanwhile_arrive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, schema: str
) -> None:
    direct = url_in(schema)
    monkeypatch.setenv("TOOLKEEPER_DATABASE_URL", direct)
    cli_config = replica_config(tmp_path, "cli")
    tk(cli_config, "toolsets", "build", "first", "ctl.echo", "--equip")
    alice = new_key(cli_config, "alice", "--admin")
    bob = new_key(cli_config, "bob", "--admin")
    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        proxied = url_in(schema, through(proxy))
        monkeypatch.setenv("TOOLKEEPER_DATABASE_URL", proxied)
        monkeypatch.setenv("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "true")
        monkeypatch.setenv("TOOLKEEPER_DATABASE_TIMEOUT", "3")
        running = Replica(replica_config(tmp_path, "a"), "a", tmp_path / "a.log")
        try:
            heard = ListChanges()
            async with client_with(
                url_of(running), bob, MODES[0], message_handler=heard.on_message
            ) as client:
                assert "ctl__echo" in await tool_names(client)
                proxy.cut()
                # The store is gone for this gateway: calls to its servers go on...
                for n in range(3):
                    echoed = await client.call_tool("ctl__echo", {"text": f"cut {n}"})
                    assert not echoed.is_error and echoed.content[0].text == f"cut {n}"  # type: ignore[union-attr]
                # ... a change through it fails, naming the database...
                refused = tk(cli_config, "keys", "create", "carol", ok=False)
                assert refused.returncode != 0 and "database" in refused.stderr.lower()
                # ... while changes made elsewhere wait for it.
                monkeypatch.setenv("TOOLKEEPER_DATABASE_URL", direct)
                tk(cli_config, "toolsets", "build", "second", "ctl.pid", "--equip")
                tk(cli_config, "keys", "revoke", "alice")
                proxy.restore()
                await eventually(lambda: heard.count >= 1, timeout=60)
                names = await tool_names(client)
                assert "ctl__pid" in names and "ctl__echo" not in names

                def alice_refused() -> bool:
                    return (
                        running.request(LISTING, authorization=f"Bearer {alice}", **LISTING_HEADERS)[0] == 401
                    )

                assert await eventually(alice_refused, timeout=30, interval=0.2)
                said = (tmp_path / "a.log").read_text()
                assert "cannot hear the store's changes" in said
                assert "hearing the store's changes again; everything was read again" in said
                # And it hears what comes next as it commits again.
                heard.count = 0
                tk(cli_config, "toolsets", "equip", "first")
                await eventually(lambda: heard.count >= 1, timeout=30)
                assert "ctl__echo" in await tool_names(client)
        finally:
            running.close()


async def test_a_listener_that_cannot_connect_says_so_as_a_store_error(schema: str) -> None:
    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        proxy.cut()
        unreachable = Store(url_in(schema, through(proxy)), timeout=2)
        with pytest.raises(StoreError, match="database"):
            async with ChangeListener.listening(unreachable):
                pass
