"""More connections to one handshake-era server, each carrying one client's calls at a time.

In the handshake era a server's request during a call (elicitation, sampling, roots) does not
say which call it belongs to. On a connection that carries the calls of one client only, it can
only be that client's; so the relay (relay/server_calls.py) gives a client whose call comes while
another client's calls are in flight a connection of its own, taken from here. A connection
that has carried no call for a while is closed; one free sooner is handed to the next client
that needs one, so a server has no more of them than clients met on it at once (which the relay
bounds). What such a connection hears from its server reaches the gateway as its own, so that
the relay knows which connection (and so which client) a request came on; its lists and state
are the server's own connection's affair.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.abc
import mcp_types as types

from toolkeeper.downstreams.base import Downstream, DownstreamListener, ServerInput, State
from toolkeeper.downstreams.side_connections import OPEN_SECONDS, SideConnections

logger = logging.getLogger(__name__)


class ForOneClient:
    """The listener of a client's connection: its server's requests and log messages reach the
    gateway from this connection (not from the server's own), so they go to the client whose
    calls it carries; its lists, state and resource updates are the server's own connection's."""

    def __init__(self, listener: DownstreamListener) -> None:
        self._listener = listener

    def downstream_changed(self, downstream: Downstream, lists: set[str] | None = None) -> None:
        return

    async def downstream_request(
        self, downstream: Downstream, request: ServerInput
    ) -> types.InputResponse | types.ErrorData:
        return await self._listener.downstream_request(downstream, request)

    async def downstream_log(
        self, downstream: Downstream, params: types.LoggingMessageNotificationParams
    ) -> None:
        await self._listener.downstream_log(downstream, params)

    async def resource_updated(self, downstream: Downstream, uri: str) -> None:
        return


class ClientConnections(SideConnections):
    """A server's connections for one client at a time: those in use, and those free until their
    idle time runs out."""

    def __init__(self, name: str, make: Callable[[], Downstream]) -> None:
        """`make`: a new connection to the server (heard through a `ForOneClient`)."""
        super().__init__(name)
        self._make = make
        self._free: list[Downstream] = []
        self._cancels: dict[Downstream, anyio.CancelScope] = {}
        # When each free connection was given back, and those whose idle time is being watched
        # (one watcher each, however often it is taken and given back).
        self._idle_since: dict[Downstream, float] = {}
        self._watched: set[Downstream] = set()

    def _forget_all(self) -> None:
        self._free.clear()
        self._cancels.clear()
        self._idle_since.clear()
        self._watched.clear()

    @property
    def open(self) -> int:
        """Connections open (in use or free)."""
        return len(self._cancels)

    def stop_calls(self, reason: str) -> int:
        """The gateway is stopping: every connection refuses calls and cancels those in flight."""
        return sum(connection.stop_calls(reason) for connection in self._cancels)

    @property
    def calls_in_flight(self) -> int:
        return sum(connection.calls_in_flight for connection in self._cancels)

    async def roots_changed(self) -> None:
        """Tell every open connection's server that the client side's roots changed."""
        for connection in list(self._cancels):
            try:
                await connection.roots_changed()
            except Exception as exc:  # one connection's trouble does not keep the others uninformed
                logger.warning("server %r: could not say that the roots changed: %s", self._name, exc)

    async def take(self) -> Downstream | None:
        """A connection for one client's calls: a free one, or a new one once it is ready. None
        if a new one could not be made ready (the caller does without)."""
        while self._free:
            connection = self._free.pop()
            if connection.available:
                return connection
            self._close(connection)
        if not self.running:
            return None
        connection = self._make()
        self._cancels[connection] = self._start(connection, "client")
        try:
            with anyio.move_on_after(OPEN_SECONDS):
                await connection.first_attempt_done.wait()
        except BaseException:  # the caller gave up: nobody will give it back
            self._close(connection)
            raise
        if connection.state is not State.READY:
            logger.warning(
                "server %r: a connection for one client did not get ready: %s",
                self._name,
                connection.last_error,
            )
            self._close(connection)
            return None
        logger.info("server %r: opened a connection for one client (%d open)", self._name, self.open)
        return connection

    def give_back(self, connection: Downstream, idle_seconds: float) -> None:
        """The connection carries no call now: free for the next client, closed after
        `idle_seconds` unless taken again."""
        if connection not in self._cancels:
            return
        self._free.append(connection)
        self._idle_since[connection] = anyio.current_time()
        if connection not in self._watched and self._tasks is not None:
            self._watched.add(connection)
            self._tasks.start_soon(self._close_when_idle, connection, idle_seconds)

    async def _close_when_idle(self, connection: Downstream, idle_seconds: float) -> None:
        """Close the connection once it has been free for `idle_seconds`; stop watching when it
        is taken (giving it back watches it again)."""
        try:
            while connection in self._free:
                left = self._idle_since[connection] + idle_seconds - anyio.current_time()
                if left <= 0:
                    self._free.remove(connection)
                    self._close(connection)
                    logger.info(
                        "server %r: closed an idle connection for one client (%d open)", self._name, self.open
                    )
                    return
                await anyio.sleep(left)
        finally:
            self._watched.discard(connection)

    def _close(self, connection: Downstream) -> None:
        self._idle_since.pop(connection, None)
        scope = self._cancels.pop(connection, None)
        if scope is not None:
            scope.cancel()
