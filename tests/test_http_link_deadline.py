"""The raw HTTP lane's per-request deadline: past it the request ends in a TimeoutError (which
the connection reports as the server's timeout), and a cancellation from elsewhere stays one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from toolkeeper.downstreams.http import HttpLink

pytestmark = pytest.mark.anyio


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """A server that reads a request and never answers."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await reader.read(65536)  # until the gateway closes the connection
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/mcp"
    server.close()


async def test_a_request_past_its_deadline_times_out(silent_server: str) -> None:
    link = HttpLink(silent_server, {})
    with pytest.raises(TimeoutError):
        await link.request("tools/call", {"name": "slow"}, 0.1)
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0
    await link.close()


async def test_a_cancelled_request_is_no_timeout(silent_server: str) -> None:
    link = HttpLink(silent_server, {})
    request = asyncio.ensure_future(link.request("tools/call", {"name": "slow"}, 30))
    await asyncio.sleep(0.1)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    await link.close()
