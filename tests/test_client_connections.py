"""A shared handshake-era server that asks its client things, with several clients at once.

Its request during a call (elicitation here) does not say which call it belongs to. The gateway
gives each client whose call meets another client's a connection of its own to the server
(`maxClientConnections` at most at once, closed when idle), so every question is placed: none
is refused, and each reaches the client whose call asked it. Real gateway over HTTP, real
clients in both eras, the controllable fixture (its `ask` tool answers with the process id of
the server that asked, so the connections can be counted).
"""

from __future__ import annotations

import os
import re
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import CONTROLLABLE, PY, ROOT, http_gateway_url, write_config
from mcp import Client
from mcp.shared.exceptions import MCPError

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

CONFORMANCE = ROOT / "tests" / "servers" / "conformance.py"
REFUSED = "came while calls of several clients were in flight"
ANSWERED = re.compile(r'answered: \{"name": "user-(\w+)"\} by pid (\d+)')


def asking_config(tmp_path, **settings: Any):
    entry = {"command": PY, "args": [CONTROLLABLE, "--asks"], "protocol": "legacy", "prefix": ""}
    return write_config(tmp_path, {"ctl": entry}, **settings)


def named(who: str):
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": f"user-{who}"})

    return elicit


def text_of(result: types.CallToolResult | MCPError) -> str:
    if isinstance(result, MCPError):
        return result.error.message
    return " ".join(getattr(c, "text", "") for c in result.content)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> str:
    try:
        with anyio.fail_after(60):
            return text_of(await client.call_tool(name, arguments))
    except MCPError as exc:
        return exc.error.message


async def wait_for_tool(client: Client, name: str) -> None:
    with anyio.fail_after(30):
        while name not in {t.name for t in (await client.list_tools()).tools}:
            await anyio.sleep(0.1)


async def rounds(clients: dict[str, Client], trials: int, arguments: dict[str, Any]) -> list[tuple[str, str]]:
    """Every client calls `ask` at once, `trials` times: (who called, the answer) for each call."""
    outcomes: list[tuple[str, str]] = []
    for _ in range(trials):

        async def one(who: str, client: Client) -> None:
            outcomes.append((who, await call(client, "ask", arguments)))

        async with anyio.create_task_group() as tg:
            for who, client in clients.items():
                tg.start_soon(one, who, client)
    return outcomes


def pids_of(outcomes: list[tuple[str, str]]) -> set[int]:
    """Each call was answered by its own client (never refused); the servers' process ids."""
    pids = set()
    for who, text in outcomes:
        assert REFUSED not in text, text
        found = ANSWERED.search(text)
        assert found is not None, text
        assert found.group(1) == who, f"client {who} got {found.group(1)}'s answer: {text}"
        pids.add(int(found.group(2)))
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_two_clients_hundreds_of_times_none_refused_each_asked_its_own(tmp_path):
    """From the very first call, also before the server has asked anything: both calls ask at
    once, which on one shared connection could not be told apart."""
    with http_gateway_url(asking_config(tmp_path)) as url:
        async with (
            Client(url, mode="legacy", elicitation_callback=named("A")) as a,
            Client(url, mode="legacy", elicitation_callback=named("B")) as b,
        ):
            await wait_for_tool(a, "ask")
            outcomes = await rounds({"A": a, "B": b}, 150, {"after": 0.001})
    assert len(outcomes) == 300
    # The server's own connection and one more: a connection is reused, not opened per call.
    assert len(pids_of(outcomes)) == 2


async def test_clients_of_both_eras_and_one_that_answers_nothing_side_by_side(tmp_path):
    """A 2026-07-28 client is asked in its call's result; a client that can answer nothing is told
    so, and never gets another client's question."""
    with http_gateway_url(asking_config(tmp_path)) as url:
        async with (
            Client(url, mode="legacy", elicitation_callback=named("A")) as a,
            Client(url, mode="legacy", elicitation_callback=named("B")) as b,
            Client(url, mode="2026-07-28", elicitation_callback=named("M")) as modern,
            Client(url, mode="legacy") as mute,
        ):
            await wait_for_tool(a, "ask")
            pids_of(await rounds({"A": a, "B": b, "M": modern}, 40, {"after": 0.01}))
            told: list[str] = []
            answered: list[tuple[str, str]] = []

            async def never_asked() -> None:
                told.append(await call(mute, "ask", {"after": 0.01}))

            async def asked() -> None:
                answered.extend(await rounds({"A": a, "M": modern}, 5, {"after": 0.01}))

            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(never_asked)
                tg.start_soon(asked)
    pids_of(answered)
    assert len(told) == 5
    for text in told:
        assert "user-" not in text and "does not support elicitation" in text, text


async def test_the_limit_holds_calls_beyond_it_wait_and_idle_connections_close(tmp_path):
    """One connection for a client at most: three clients at once use two servers' processes, the
    third client's calls waiting their turn rather than being refused; idle, the extra closes."""
    config = asking_config(tmp_path, maxClientConnections=1, clientConnectionIdleSeconds=1)
    with http_gateway_url(config) as url:
        async with (
            Client(url, mode="legacy", elicitation_callback=named("A")) as a,
            Client(url, mode="legacy", elicitation_callback=named("B")) as b,
            Client(url, mode="legacy", elicitation_callback=named("C")) as c,
        ):
            await wait_for_tool(a, "ask")
            # The server has asked once: from then on calls beyond the limit take turns.
            first = await call(a, "ask", {})
            assert "user-A" in first, first
            own = int(ANSWERED.search(first).group(2))  # type: ignore[union-attr]
            outcomes = await rounds({"A": a, "B": b, "C": c}, 30, {"after": 0.02})
            pids = pids_of(outcomes)
            assert len(pids) == 2 and own in pids, pids
            (extra,) = pids - {own}
            with anyio.fail_after(30):
                while alive(extra):
                    await anyio.sleep(0.1)
            # Needed again, a connection is opened again.
            again = pids_of(await rounds({"A": a, "B": b}, 3, {"after": 0.02}))
            assert own in again and len(again) == 2, again


async def test_the_conformance_server_with_two_clients_refuses_nothing(tmp_path):
    entry = {"command": PY, "args": [str(CONFORMANCE)], "protocol": "legacy", "prefix": ""}
    config = write_config(tmp_path, {"conf": entry})

    def elicitor(who: str):
        async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            return types.ElicitResult(
                action="accept", content={"username": f"user-{who}", "email": f"{who}@x"}
            )

        return elicit

    with http_gateway_url(config) as url:
        async with (
            Client(url, mode="legacy", elicitation_callback=elicitor("A")) as a,
            Client(url, mode="legacy", elicitation_callback=elicitor("B")) as b,
        ):
            await wait_for_tool(a, "test_elicitation")
            texts: list[tuple[str, str]] = []
            for _ in range(100):

                async def one(who: str, client: Client) -> None:
                    texts.append((who, await call(client, "test_elicitation", {"message": "Who?"})))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(one, "A", a)
                    tg.start_soon(one, "B", b)
    for who, text in texts:
        other = "B" if who == "A" else "A"
        assert f"user-{who}" in text and f"user-{other}" not in text, text
