"""The HTTP server's transport: a whole answer leaves in one write, and nothing is held past the
loop step that wrote it (an event stream's headers go out before its first event)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvicorn

from toolkeeper.edge.one_write import OneWriteHttpProtocol, WriteBehind

pytestmark = pytest.mark.anyio


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_the_writes_of_one_step_leave_in_one_write_in_order() -> None:
    transport = Transport()
    held = WriteBehind(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    held.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    held.write(b"{}")
    assert transport.writes == [] and held.get_write_buffer_size() == 40
    await asyncio.sleep(0)
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    assert held.get_extra_info("peername") == "info:peername"


async def test_a_write_is_not_held_past_its_step_and_closing_writes_what_is_held_first() -> None:
    transport = Transport()
    held = WriteBehind(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    held.write(b"head")
    await asyncio.sleep(0)
    assert transport.writes == [b"head"]
    held.write(b"last")
    held.close()
    assert transport.writes == [b"head", b"last"] and transport.closed
    held.write(b"after")
    await asyncio.sleep(0)
    assert transport.writes == [b"head", b"last"]  # a closed connection is written no more


async def test_an_event_stream_gets_its_headers_before_its_first_event() -> None:
    first_event = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await first_event.wait()
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": False})

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, http=OneWriteHttpProtocol, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /events HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        # A backstop only: held headers would never come, since the event waits for them.
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 OK") and b"text/event-stream" in head
        first_event.set()
        assert b"data: 1" in await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 10)
        writer.close()
    finally:
        server.should_exit = True
        await serving
