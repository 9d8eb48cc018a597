"""The resource subscriptions the gateway's clients hold on one downstream MCP server.

Many clients may subscribe to the same resource; the server is asked once, when the first
subscribes, and told once more when the last one leaves.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import anyio
import mcp_types as types

from toolkeeper.downstreams.base import CallTimedOut, Era

logger = logging.getLogger(__name__)


class SubscribedServer(Protocol):
    """What the subscriptions need of the connection to the server they are held on."""

    @property
    def name(self) -> str: ...

    @property
    def era(self) -> Era | None: ...

    async def request(self, request: Any) -> dict[str, Any]: ...


class Subscriptions:
    """The subscribed resource URIs of one server, with how many subscribers each.

    In the handshake era the first subscriber sends `resources/subscribe` and the last one
    `resources/unsubscribe`, and a new session renews them all. The 2026-07-28 era has no such
    requests: the URIs travel with the `subscriptions/listen` stream, so a change bumps the
    version of the subscriptions, wakes the stream (which reopens with them), and holds once the
    server has acknowledged a stream that carries that version.
    """

    def __init__(self, server: SubscribedServer, *, timeout: float) -> None:
        self._server = server
        self._timeout = timeout
        self._subscribers: dict[str, int] = {}
        # Set when the subscriptions changed since the listen stream last read them.
        self._changed = anyio.Event()
        # The version of the subscriptions, and the one the open listen stream carries.
        self._version = 0
        self._listening_version = -1
        self._listen_acknowledged = anyio.Event()

    @property
    def uris(self) -> list[str]:
        return sorted(self._subscribers)

    async def subscribe(self, uri: str) -> None:
        """Count one more subscriber to `uri`; the first one subscribes downstream."""
        first = uri not in self._subscribers
        self._subscribers[uri] = self._subscribers.get(uri, 0) + 1
        if not first:
            return
        try:
            await self._change(types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)))
        except BaseException:
            self._drop_subscriber(uri)
            raise

    async def unsubscribe(self, uri: str) -> None:
        """One subscriber fewer; the last one unsubscribes downstream."""
        if uri not in self._subscribers or self._drop_subscriber(uri):
            return
        await self._change(types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)))

    def _drop_subscriber(self, uri: str) -> int:
        left = self._subscribers[uri] - 1
        if left:
            self._subscribers[uri] = left
        else:
            del self._subscribers[uri]
        return left

    async def _change(self, request: Any) -> None:
        if self._server.era is not Era.MODERN:
            await self._server.request(request)
            return
        # No resources/subscribe on the modern wire: the listen stream carries the URIs, so it is
        # reopened, and the change holds once the server has acknowledged the new stream.
        self._version += 1
        wanted = self._version
        self._changed.set()
        with anyio.move_on_after(self._timeout):
            while self._listening_version < wanted:
                await self._listen_acknowledged.wait()
            return
        raise CallTimedOut(
            f"server '{self._server.name}' did not acknowledge the new subscriptions "
            f"within {self._timeout:g}s"
        )

    async def renew(self) -> None:
        """Subscribe again on a new handshake-era session to what was subscribed before."""
        for uri in list(self._subscribers):
            try:
                await self._server.request(
                    types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
                )
            except Exception as exc:
                logger.warning(
                    "server %r: could not renew the subscription to %s: %s", self._server.name, uri, exc
                )

    # The listen stream's side (2026-07-28 era).
    def stream_opening(self) -> int:
        """A listen stream is about to open with the current `uris`: the version it carries. A
        change from now on wakes `wait_for_change`."""
        self._changed = anyio.Event()
        return self._version

    def listening_for(self, version: int) -> None:
        """The listen stream carrying `version` is open (or none is needed, or none can be):
        changes up to that version hold."""
        self._listening_version = version
        acknowledged, self._listen_acknowledged = self._listen_acknowledged, anyio.Event()
        acknowledged.set()

    @property
    def changed(self) -> bool:
        """Whether the subscriptions changed since the listen stream opened."""
        return self._changed.is_set()

    async def wait_for_change(self) -> None:
        await self._changed.wait()
