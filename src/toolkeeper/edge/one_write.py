"""uvicorn's httptools protocol, with what a response writes in one step of the event loop sent
in one write.

uvicorn writes a response's status line and headers when the app sends `http.response.start`,
and its body apart: two system calls, two TCP segments and, on loopback, two wake-ups of the
client for every answer the edge gives. Here the writes made while one callback or task step
runs are joined and handed to the socket once that step is over (in the same turn of the loop),
so a whole answer leaves in one write and nothing waits longer than the step that wrote it: an
event stream's headers still go out at once, even when its first event comes much later.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class WriteBehind:
    """A transport whose writes are held until the end of the loop step that made them, then
    written together, in order. Closing (or ending the stream) writes what is held first;
    everything else is the socket's transport's own. Aborting drops what is held, as it drops
    what the transport buffered."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is not None:
            self._held.append(bytes(data))
            return
        self._held = [bytes(data)]
        self._loop.call_soon(self.flush)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._held or ()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a `WriteBehind` transport: `uvicorn.Config(http=...)`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(WriteBehind(transport, self.loop))  # type: ignore[arg-type]
