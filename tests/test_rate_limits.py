"""Rate limits: the settings and their refusals, the buckets' arithmetic, the buckets in the real
PostgreSQL server (every replica's count, row locks per bucket, a store that goes away), and real
gateway processes over stdio and HTTP with client keys as principals, alone and as two replicas
of one PostgreSQL store, with real clients of both eras."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import (
    MODES,
    controllable,
    free_port,
    gateway_client,
    spawn_http_gateway,
    stop,
    wait_port,
    write_config,
)
from mcp import Client
from sqlalchemy import text
from sqlalchemy.engine import make_url
from test_auth import client_with, new_key, team_config, tk
from test_store import POSTGRES

from tests.postgres import drop_schema
from toolkeeper.config.loader import ConfigError, parse_config_text
from toolkeeper.config.rates import Rate, parse_rate
from toolkeeper.pipeline.call import ClientIdentity, Principal, ToolCall
from toolkeeper.pipeline.rate_buckets import MemoryBuckets
from toolkeeper.pipeline.rate_limits import META_KEY, RATE_LIMITED, RateLimit, RateLimits
from toolkeeper.store import Store, rate_buckets

pytestmark = pytest.mark.anyio


def settings_of(limits: Any, env: dict[str, str] | None = None) -> Any:
    text_ = json.dumps({"mcpServers": {}, "toolkeeper": {"rateLimits": limits}})
    return parse_config_text(text_, environ=env or {}).settings


def rate(written: str) -> Rate:
    parsed = parse_rate(written)
    assert parsed is not None
    return parsed


# -- the settings --------------------------------------------------------------------------


def test_rates_as_written_and_the_limits_they_make() -> None:
    assert rate("120/minute") == Rate(120, 60.0, "120/minute")
    assert rate(" 100 / 15 minutes ") == Rate(100, 900.0, "100 / 15 minutes")
    assert (rate("3/s").period, rate("5/hour").period, rate("2/3 days").period) == (1.0, 3600.0, 259200.0)
    for unwritten in ("", "120", "120/fortnight", "0/minute", "1/0 minutes", "-1/s", "1.5/s", "ten/s"):
        assert parse_rate(unwritten) is None, unwritten

    settings = settings_of(
        {
            "perPrincipal": "120/minute",
            "principals": {"ci-bot": "30/minute", "oauth:alice": "unlimited", "local": None},
            "tools": {"github.create_issue": "10/minute", "github.search": "unlimited"},
        }
    )
    assert settings.rate_limit_per_principal == rate("120/minute")
    assert settings.rate_limit_principals == {"ci-bot": rate("30/minute"), "oauth:alice": None, "local": None}
    assert settings.rate_limit_tools == {"github.create_issue": rate("10/minute")}
    limits = RateLimits.from_settings(settings)
    assert limits.any
    by_bot = limits.for_call("ci-bot", "github.create_issue")
    assert [(limit.setting, str(limit.rate)) for limit in by_bot] == [
        ('rateLimits.principals["ci-bot"]', "30/minute"),
        ('rateLimits.tools["github.create_issue"]', "10/minute"),
    ]
    assert [limit.setting for limit in limits.for_call("oauth:alice", "github.search")] == []
    assert [limit.setting for limit in limits.for_call("bob", None)] == ["rateLimits.perPrincipal"]
    # One bucket per principal, and per principal and tool: nobody shares another's.
    subjects = {
        limit.subject for p in ("bob", "carol") for limit in limits.for_call(p, "github.create_issue")
    }
    assert len(subjects) == 4

    # A key may be named as accounts name it.
    assert settings_of({"principals": {"key:ci-bot": "1/s"}}).rate_limit_principals == {"ci-bot": rate("1/s")}

    off = settings_of({})
    assert not RateLimits.from_settings(off).any
    assert off.rate_limit_per_principal is None and off.rate_limit_tools == {}
    from_env = settings_of({"perPrincipal": "5/s"}, {"TOOLKEEPER_RATE_LIMIT_PER_PRINCIPAL": "7/minute"})
    assert from_env.rate_limit_per_principal == rate("7/minute")


@pytest.mark.parametrize(
    ("limits", "env", "words"),
    [
        ([], {}, ["toolkeeper.rateLimits must look like", '"perPrincipal": "120/minute"']),
        ({"perMinute": 5}, {}, ["toolkeeper.rateLimits must look like", "each part optional"]),
        (
            {"perPrincipal": "12/fortnight"},
            {},
            ["rateLimits.perPrincipal must be a rate like", "'12/fortnight'"],
        ),
        ({"perPrincipal": 120}, {}, ["rateLimits.perPrincipal must be a rate like", '"unlimited"']),
        (
            {},
            {"TOOLKEEPER_RATE_LIMIT_PER_PRINCIPAL": "lots"},
            ["TOOLKEEPER_RATE_LIMIT_PER_PRINCIPAL", "'lots'"],
        ),
        ({"principals": ["ci-bot"]}, {}, ["rateLimits.principals must be an object like", '"ci-bot"']),
        ({"principals": {"ci-bot": "0/s"}}, {}, ["rateLimits.principals['ci-bot'] must be a rate", "'0/s'"]),
        ({"principals": {" ": "1/s"}}, {}, ["rateLimits.principals must name each principal", "got ' '"]),
        ({"tools": {"create_issue": "1/s"}}, {}, ["'create_issue', which is no tool", "server.tool"]),
        ({"tools": {"git hub.x": "1/s"}}, {}, ["'git hub.x', which is no tool"]),
        ({"tools": {"github.": "1/s"}}, {}, ["'github.', which is no tool"]),
        ({"tools": {"github.x": {"rate": "1/s"}}}, {}, ["rateLimits.tools['github.x'] must be a rate"]),
    ],
)
def test_a_limit_written_wrong_stops_the_gateway_naming_it_and_the_form(
    limits: Any, env: dict[str, str], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_of(limits, env)
    message = str(refused.value)
    assert all(word in message for word in words), message


def test_a_tools_limit_for_a_server_not_in_the_file_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    servers = {"github": {"command": "github-mcp"}}
    limits = {"tools": {"github.create_issue": "1/s", "gihtub.search": "1/s"}}
    parse_config_text(json.dumps({"mcpServers": servers, "toolkeeper": {"rateLimits": limits}}), environ={})
    assert "'gihtub.search', but there is no server 'gihtub'" in caplog.text
    assert "github.create_issue" not in caplog.text


# -- the buckets ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_lets_its_calls_through_at_once_then_one_per_interval_and_takes_all_or_none() -> None:
    clock = Clock()
    buckets = MemoryBuckets(clock)
    three = rate("3/minute")
    assert [buckets.take([("a", three)]) for _ in range(3)] == [None, None, None]
    position, wait = buckets.take([("a", three)]) or (None, None)
    assert position == 0 and wait == pytest.approx(20.0)  # one call's room comes back every 20 s
    assert buckets.take([("b", three)]) is None  # another subject has its own bucket
    clock.now += 19.9
    assert buckets.take([("a", three)]) is not None
    clock.now += 0.1
    assert buckets.take([("a", three)]) is None
    assert buckets.take([("a", three)]) is not None
    clock.now += 60
    assert [buckets.take([("a", three)]) for _ in range(3)] == [None, None, None]  # full again, no more

    # A call over its second limit is not charged to its first.
    one = rate("1/minute")
    assert buckets.take([("p", three), ("t", one)]) is None
    assert (buckets.take([("p", three), ("t", one)]) or (None,))[0] == 1
    assert buckets.take([("p", three)]) is None and buckets.take([("p", three)]) is None
    assert (buckets.take([("p", three)]) or (None,))[0] == 0


@pytest.fixture
async def pg_store() -> AsyncIterator[Store]:
    schema = f"tk_limits_{uuid.uuid4().hex[:12]}"
    try:
        async with Store(f"{POSTGRES}?schema={schema}") as store:
            yield store
    finally:
        await drop_schema(schema)


async def take_in(store: Store, subject: str, limit: Rate) -> float | None:
    async with store.read() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return await rate_buckets.take(conn, subject, limit)


async def test_in_postgresql_concurrent_takes_get_exactly_the_buckets_room(pg_store: Store) -> None:
    ten = rate("10/hour")
    results: list[float | None] = []

    async def take_one() -> None:
        results.append(await take_in(pg_store, "shared", ten))

    async with anyio.create_task_group() as tg:
        for _ in range(30):
            tg.start_soon(take_one)
    assert results.count(None) == 10
    waits = [wait for wait in results if wait is not None]
    assert all(0 < wait <= 360 for wait in waits)  # one call's room comes back every 6 minutes
    async with pg_store.read() as conn:
        persistence = await conn.execute(
            text("SELECT relpersistence::text FROM pg_class WHERE oid = 'rate_buckets'::regclass")
        )
        assert persistence.scalar_one() == "u"  # unlogged: counting waits for no disk write


def call_by(principal: str, tool: str = "ctl.echo") -> ToolCall:
    who = ClientIdentity("test", "1", "s", Principal(principal, "key"), bound=True)
    name = tool.replace(".", "__")
    call = ToolCall(name=name, params={"name": name, "arguments": {}}, modern=False, client=who)
    call.target = SimpleNamespace(tool=SimpleNamespace(namespaced_name=tool))  # type: ignore[assignment]
    return call


async def test_in_postgresql_a_call_refused_by_one_limit_gives_back_what_it_took_from_the_other(
    pg_store: Store,
) -> None:
    stage = RateLimit(RateLimits(rate("10/hour"), {}, {"ctl.pid": rate("1/hour")}), pg_store)
    assert await stage.run(call_by("alice", "ctl.pid")) is None
    refused = await stage.run(call_by("alice", "ctl.pid"))
    assert refused is not None and "rateLimits.tools" in refused["content"][0]["text"]
    async with pg_store.read() as conn:
        rows = dict((await conn.execute(text("SELECT subject, refilled_at FROM rate_buckets"))).all())
        now = (await conn.execute(text("SELECT extract(epoch from now())::float"))).scalar_one()
    # The principal's bucket holds the one call that ran (6 minutes of refill), not two.
    assert rows[json.dumps(["principal", "alice"])] - now == pytest.approx(360, abs=30)
    # Its other calls still run, nine more.
    assert [await stage.run(call_by("alice")) for _ in range(9)] == [None] * 9
    assert await stage.run(call_by("alice")) is not None


async def test_a_bucket_being_taken_holds_up_no_other_bucket(pg_store: Store) -> None:
    many = rate("100/minute")
    assert await take_in(pg_store, "flooder", many) is None
    # Another transaction holds the flooder's row (as its own calls would, one after another).
    async with pg_store.read() as holder, holder.begin():
        await holder.execute(text("SELECT * FROM rate_buckets WHERE subject = 'flooder' FOR UPDATE"))
        with anyio.fail_after(30):  # a generous deadline: a lock on every bucket would never end
            assert await take_in(pg_store, "someone else", many) is None


# -- the stage ---------------------------------------------------------------------------------


class Proxy:
    """A TCP proxy to PostgreSQL the test can cut: while cut, it closes every connection and
    refuses new ones."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.cut = False
        self.port = 0
        self._streams: list[anyio.abc.SocketStream] = []

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started()
        await listener.serve(self._relay)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        if self.cut:
            await client.aclose()
            return
        server = await anyio.connect_tcp(*self.target)
        self._streams += [client, server]

        async def pump(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
            try:
                async for chunk in source:
                    await sink.send(chunk)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass
            finally:
                await sink.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump, client, server)
            tg.start_soon(pump, server, client)

    async def cut_off(self) -> None:
        self.cut = True
        for stream in self._streams:
            await stream.aclose()
        self._streams = []


async def test_with_postgresql_gone_calls_go_on_counted_by_this_replica_and_the_shared_count_resumes(
    pg_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    database = make_url(pg_store.url)
    proxy = Proxy(database.host or "127.0.0.1", database.port or 5432)
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        through_proxy = database.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        async with Store(through_proxy, timeout=5) as store:
            stage = RateLimit(RateLimits(rate("2/hour"), {}, {}), store)
            assert [await stage.run(call_by("alice")) for _ in range(2)] == [None, None]
            refused = await stage.run(call_by("alice"))
            assert refused is not None and refused["isError"]

            await proxy.cut_off()
            # This replica's own count starts afresh: bob's calls go on, and are still limited.
            results = [await stage.run(call_by("bob")) for _ in range(3)]
            assert results[:2] == [None, None] and results[2] is not None
            assert "the store cannot count calls" in caplog.text
            # Alice's full bucket is remembered while the store is gone.
            assert await stage.run(call_by("alice")) is not None

            proxy.cut = False
            stage._shared_again_at = 0.0  # the outage's wait over, not slept through
            assert await stage.run(call_by("carol")) is None
            async with pg_store.read() as conn:
                subjects = (await conn.execute(text("SELECT subject FROM rate_buckets"))).scalars().all()
            assert sorted(json.loads(s)[1] for s in subjects) == ["alice", "carol"]  # bob counted only here
        tg.cancel_scope.cancel()


# -- real gateways -------------------------------------------------------------------------


@contextmanager
def serving(config: Path, **env: str) -> Iterator[str]:
    """The /mcp URL of `toolkeeper serve --transport http` on a free port; a generous wait for
    it to listen, for a machine busy with other tests."""
    port = free_port()
    process = spawn_http_gateway(config, port, env=env)
    try:
        wait_port(port, timeout=120)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


def only_text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    return result.content[0].text


def audit_records(config: Path) -> list[dict[str, Any]]:
    done = tk(config, "audit", "--json")
    return [json.loads(line) for line in done.stdout.splitlines()]


def retry_after(result: types.CallToolResult) -> float:
    assert result.is_error and result.meta is not None
    told = result.meta[META_KEY]
    assert f"Retry in {told['retryAfter']:g} seconds." in only_text(result)
    return float(told["retryAfter"])


@pytest.mark.parametrize("mode", MODES)
async def test_over_stdio_each_limit_refuses_with_when_to_retry_and_the_audit_says_rate_limited(
    tmp_path: Path, mode: str
) -> None:
    config = write_config(
        tmp_path,
        {"ctl": controllable()},
        rateLimits={"perPrincipal": "4/hour", "tools": {"ctl.pid": "1/hour"}},
    )
    async with gateway_client(config, mode) as client:
        assert not (await client.call_tool("ctl__pid", {})).is_error
        by_tool = await client.call_tool("ctl__pid", {})
        assert 'calls of ctl.pid by local are limited to 1/hour (toolkeeper.rateLimits.tools["ctl.pid"])' in (
            only_text(by_tool)
        )
        assert 3000 < retry_after(by_tool) <= 3600
        assert (
            by_tool.meta is not None
            and by_tool.meta[META_KEY]["limit"] == 'toolkeeper.rateLimits.tools["ctl.pid"]'
        )
        # The refused call took nothing from the principal's bucket: three more calls run.
        for _ in range(3):
            assert only_text(await client.call_tool("ctl__echo", {"text": "hi"})) == "hi"
        by_principal = await client.call_tool("ctl__echo", {"text": "hi"})
        assert "calls by local are limited to 4/hour (toolkeeper.rateLimits.perPrincipal)" in only_text(
            by_principal
        )
        assert 0 < retry_after(by_principal) <= 900
    records = await anyio.to_thread.run_sync(audit_records, config)
    limited = [record for record in records if record["outcome"] == RATE_LIMITED]
    # Newest first.
    assert [(r["tool"], r["decision"]) for r in limited] == [("echo", "deny"), ("pid", "deny")]
    assert "rateLimits.tools" in limited[1]["detail"] and "retry in" in limited[1]["detail"]
    assert sum(record["outcome"] == "ok" for record in records) == 4
    shown = tk(config, "audit").stdout
    assert RATE_LIMITED in shown


async def test_over_http_a_flood_from_one_key_is_limited_and_the_others_calls_all_run(tmp_path: Path) -> None:
    config = team_config(tmp_path, rateLimits={"perPrincipal": "3/hour", "principals": {"bob": "unlimited"}})
    alice, bob, carol = (new_key(config, name) for name in ("alice", "bob", "carol"))
    with serving(config) as url:
        async with (
            client_with(url, alice, MODES[0]) as as_alice,
            client_with(url, bob, MODES[1]) as as_bob,
            client_with(url, carol, MODES[1]) as as_carol,
        ):
            flood: list[types.CallToolResult] = []
            calm: list[types.CallToolResult] = []

            async def call(client: Client, into: list[types.CallToolResult]) -> None:
                into.append(await client.call_tool("ctl__echo", {"text": "hi"}))

            async with anyio.create_task_group() as tg:
                for _ in range(40):
                    tg.start_soon(call, as_alice, flood)
                for _ in range(10):
                    tg.start_soon(call, as_bob, calm)
            assert sum(not result.is_error for result in flood) == 3
            assert all("calls by alice are limited to 3/hour" in only_text(r) for r in flood if r.is_error)
            assert all(not result.is_error for result in calm)  # bob is unlimited, and not slowed to a halt
            # Carol's bucket is her own; her client (2026-07-28 over HTTP) is told when to retry too.
            carols = [await as_carol.call_tool("ctl__echo", {"text": "x"}) for _ in range(4)]
            assert [result.is_error for result in carols] == [False, False, False, True]
            assert 0 < retry_after(carols[3]) <= 1200
            refused = next(result for result in flood if result.is_error)
            assert 0 < retry_after(refused) <= 1200  # alice's, handshake era
    records = await anyio.to_thread.run_sync(audit_records, config)
    limited = [record["principal"] for record in records if record["outcome"] == RATE_LIMITED]
    assert sorted(set(limited)) == ["alice", "carol"] and len(limited) == 38


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    schema = f"tk_limits_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES}?schema={schema}"
    await drop_schema(schema)


async def test_two_replicas_on_one_postgresql_store_share_each_principals_count(
    tmp_path: Path, pg_schema: str
) -> None:
    config = team_config(tmp_path, databaseUrl=pg_schema, rateLimits={"perPrincipal": "4/hour"})
    alice, bob = new_key(config, "alice"), new_key(config, "bob")
    with (
        serving(config, TOOLKEEPER_REPLICA="replica-a") as a,
        serving(config, TOOLKEEPER_REPLICA="replica-b") as b,
    ):
        async with (
            client_with(a, alice, MODES[0]) as alice_on_a,
            client_with(b, alice, MODES[1]) as alice_on_b,
            client_with(b, bob, MODES[0]) as bob_on_b,
        ):
            ran = []
            for turn in range(8):
                client = alice_on_a if turn % 2 == 0 else alice_on_b
                ran.append(not (await client.call_tool("ctl__echo", {"text": "hi"})).is_error)
            assert ran == [True] * 4 + [False] * 4  # four in all, whichever replica answered
            refused = await alice_on_a.call_tool("ctl__echo", {"text": "hi"})
            assert "calls by alice are limited to 4/hour" in only_text(refused)
            assert not (await bob_on_b.call_tool("ctl__echo", {"text": "hi"})).is_error
