"""Transports to downstream servers: stdio children, streamable HTTP and SSE.

Each transport yields the SDK's (read, write) stream pair. The read side is wrapped so the
supervisor learns when the connection is gone (a child exited, a stream ended), and a stdio
child's stderr is read line by line into the gateway's log, prefixed with the server name.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from toolkeeper.config.model import ServerConfig
from toolkeeper.downstreams.http import HttpLink, StampLearner
from toolkeeper.downstreams.raw import RawLane
from toolkeeper.downstreams.stdio import MAX_LINE_BYTES, open_stdio

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_SECONDS = 30.0
HTTP_STREAM_READ_TIMEOUT_SECONDS = 300.0
# The SDK's client takes at most 1 MiB in one event of a stream, and a server's whole tools/list
# is one event: one tool with a 2 MB description would cost the server every tool. Bounded still,
# as one message of a server over stdio is.
MAX_EVENT_BYTES = MAX_LINE_BYTES


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


@dataclass(frozen=True)
class SignedInRequests:
    """How a signed-in server's requests carry its token: the SDK transport's auth, and the raw
    lane's header of the moment."""

    auth: httpx2.Auth
    authorization: Callable[[], str | None]


@asynccontextmanager
async def _http(
    config: ServerConfig, signed_in: SignedInRequests | None
) -> AsyncIterator[tuple[Any, Any, HttpLink | None]]:
    # The SDK's own defaults: a server may hold a response stream open, so reads wait longer.
    timeout = httpx2.Timeout(HTTP_TIMEOUT_SECONDS, read=HTTP_STREAM_READ_TIMEOUT_SECONDS)
    url = config.url or ""
    headers = dict(config.headers)
    authorization = signed_in.authorization if signed_in is not None else None
    link = HttpLink(url, headers, authorization) if HttpLink.fits(url, headers) else None
    # The link learns a handshake-era session's headers from the SDK's own requests.
    hooks: dict[str, list[Any]] = {"request": [link.observe]} if link is not None else {}
    async with (
        httpx2.AsyncClient(
            headers=headers,
            timeout=timeout,
            event_hooks=hooks,
            auth=signed_in.auth if signed_in is not None else None,
        ) as http_client,
        streamable_http_client(url, http_client=http_client, max_sse_event_size=MAX_EVENT_BYTES) as (
            read,
            write,
        ),
    ):
        if link is None:
            yield read, write, None
            return
        try:
            yield read, StampLearner(write, link), link
        finally:
            await link.close()


@asynccontextmanager
async def open_transport(
    config: ServerConfig, lost: anyio.Event, signed_in: SignedInRequests | None = None
) -> AsyncIterator[tuple[Any, Any, RawLane | None]]:
    """The SDK's (read, write) streams to the server, and the raw lane where the transport has
    one (stdio children, streamable HTTP); `signed_in` for a server that signs in."""
    if config.transport == "stdio":
        async with open_stdio(config, lost) as (link, read_stream, write_stream):
            yield read_stream, write_stream, link
        return
    if config.transport == "http":
        async with _http(config, signed_in) as (read_stream, write_stream, http_link):
            yield WatchedReadStream(read_stream, lost), write_stream, http_link
        return
    auth = signed_in.auth if signed_in is not None else None
    async with sse_client(config.url or "", headers=dict(config.headers) or None, auth=auth) as (
        read_stream,
        write_stream,
    ):
        yield WatchedReadStream(read_stream, lost), write_stream, None
