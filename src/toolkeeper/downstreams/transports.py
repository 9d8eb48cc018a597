"""Transports to downstream servers: stdio children, streamable HTTP and SSE.

Each transport yields the SDK's (read, write) stream pair. The read side is wrapped so the
supervisor learns when the connection is gone (a child exited, a stream ended), and a stdio
child's stderr is read line by line into the gateway's log, prefixed with the server name.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from toolkeeper.config.model import ServerConfig

logger = logging.getLogger(__name__)
child_logger = logging.getLogger("toolkeeper.child")


class WatchedReadStream:
    """Delegates to the SDK's read stream and sets `lost` when it ends."""

    def __init__(self, inner: Any, lost: anyio.Event) -> None:
        self._inner = inner
        self._lost = lost

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._lost.set()
            raise

    def __aiter__(self) -> WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> WatchedReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _pump_stderr(server: str, fd: int) -> None:
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as stream:
        for line in stream:
            line = line.rstrip()
            if line:
                child_logger.info("[%s] %s", server, line)


@asynccontextmanager
async def _stdio(config: ServerConfig) -> AsyncIterator[Any]:
    params = StdioServerParameters(
        command=config.command or "",
        args=list(config.args),
        env=dict(config.env) or None,
        cwd=config.cwd,
    )
    read_fd, write_fd = os.pipe()
    errlog = os.fdopen(write_fd, "w")
    pump = threading.Thread(target=_pump_stderr, args=(config.name, read_fd), daemon=True)
    pump.start()
    try:
        async with stdio_client(params, errlog=errlog) as streams:
            # The child holds its own copy now; closing ours lets the pump see EOF when it exits.
            errlog.close()
            yield streams
    finally:
        if not errlog.closed:
            errlog.close()


@asynccontextmanager
async def _http(config: ServerConfig) -> AsyncIterator[Any]:
    async with create_mcp_http_client(headers=dict(config.headers) or None) as http_client:
        async with streamable_http_client(config.url or "", http_client=http_client) as streams:
            yield streams


@asynccontextmanager
async def open_transport(config: ServerConfig, lost: anyio.Event) -> AsyncIterator[Any]:
    if config.transport == "stdio":
        opener = _stdio(config)
    elif config.transport == "http":
        opener = _http(config)
    else:
        opener = sse_client(config.url or "", headers=dict(config.headers) or None)
    async with opener as (read_stream, write_stream):
        yield WatchedReadStream(read_stream, lost), write_stream
