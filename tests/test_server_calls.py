"""Which connection each call to a handshake-era server runs on (relay/server_calls.py), with
stand-in connections: the rules alone, no server processes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from toolkeeper.downstreams.base import Era
from toolkeeper.relay.server_calls import Caller, ServerCalls

pytestmark = pytest.mark.anyio


class Connection:
    """A stand-in connection: only what ServerCalls looks at."""

    def __init__(self, name: str, era: Era = Era.LEGACY, pool: Pool | None = None) -> None:
        self.name = name
        self.era = era
        self.available = True
        self.client_connections = pool


class Pool:
    """Stand-in connections for one client each: counts what was opened and given back."""

    def __init__(self) -> None:
        self.opened: list[Connection] = []
        self.given_back: list[Connection] = []
        self.free: list[Connection] = []

    async def take(self) -> Any:
        if self.free:
            return self.free.pop()
        connection = Connection(f"extra-{len(self.opened)}")
        self.opened.append(connection)
        return connection

    def give_back(self, connection: Any, idle_seconds: float) -> None:
        self.given_back.append(connection)
        self.free.append(connection)


def server(limit: int = 8, era: Era = Era.LEGACY) -> tuple[ServerCalls, Connection, Pool]:
    pool = Pool()
    own = Connection("own", era, pool)
    return ServerCalls(own, max_client_connections=limit), own, pool  # type: ignore[arg-type]


def client() -> Caller:
    """A call of a client that can answer the server's questions (its answerer is its own)."""
    return Caller(None, answerer=object())


async def test_one_clients_calls_share_the_servers_own_connection():
    calls, own, pool = server()
    answerer = object()
    first, second = Caller(None, answerer), Caller(None, answerer)
    assert await calls.start(first) is own
    assert await calls.start(second) is own
    assert pool.opened == []


async def test_calls_that_can_answer_nothing_share_one_connection():
    calls, own, pool = server()
    assert [await calls.start(Caller(None)) for _ in range(3)] == [own] * 3
    assert pool.opened == []


async def test_another_clients_call_gets_a_connection_of_its_own_given_back_when_done():
    calls, own, pool = server()
    a, b, mute = client(), client(), Caller(None)
    assert await calls.start(a) is own
    on_b = await calls.start(b)
    on_mute = await calls.start(mute)
    assert on_b is not own and on_mute is not own and on_b is not on_mute
    assert len(pool.opened) == 2
    calls.finish(b)
    assert pool.given_back == [on_b]
    # The next client takes the free connection rather than a new one.
    c = client()
    assert await calls.start(c) is on_b
    assert len(pool.opened) == 2
    assert calls.lane_of(on_b) is not None and calls.lane_of(on_b).running == [c]  # type: ignore[union-attr]


async def test_beyond_the_limit_calls_share_until_the_server_asks_then_wait_their_turn():
    calls, own, pool = server(limit=1)
    a, b, c = client(), client(), client()
    assert await calls.start(a) is own
    extra = await calls.start(b)
    assert extra is not own
    # Beyond the limit, before the server has asked anything: c shares the server's own.
    assert await calls.start(c) is own
    calls.finish(c)
    calls.asks = True
    d = client()
    started: list[Any] = []

    async def start_d() -> None:
        started.append(await calls.start(d))

    async with anyio.create_task_group() as tg:
        tg.start_soon(start_d)
        await anyio.wait_all_tasks_blocked()
        assert started == [], "d waits: both connections carry another client's calls"
        calls.finish(b)
    assert started == [extra]
    assert len(pool.opened) == 1


async def test_without_connections_of_one_client_each_calls_take_turns_once_the_server_asks():
    calls, own, pool = server(limit=0)
    a, b = client(), client()
    assert await calls.start(a) is own
    assert await calls.start(b) is own  # the server has asked nothing yet
    assert calls.shared.asked_ambiguously()
    calls.finish(b)
    calls.asks = True
    c = client()
    async with anyio.create_task_group() as tg:
        tg.start_soon(calls.start, c)
        await anyio.wait_all_tasks_blocked()
        assert c not in calls.running
        calls.finish(a)
    assert calls.running == [c] and pool.opened == []


async def test_a_2026_07_28_server_is_never_given_more_connections():
    calls, own, pool = server(era=Era.MODERN)
    assert [await calls.start(client()) for _ in range(3)] == [own] * 3
    assert pool.opened == []


async def test_a_question_among_calls_that_can_answer_nothing_is_not_ambiguous():
    calls, _, _ = server(limit=0)
    for _ in range(3):
        await calls.start(Caller(None))
    assert not calls.shared.asked_ambiguously()
    await calls.start(client())
    assert calls.shared.asked_ambiguously()
