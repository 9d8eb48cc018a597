"""The calls in flight on one downstream server, the connections they run on, and when another
may start.

A handshake-era server's request (elicitation, sampling, roots) does not say which call it
belongs to (over streamable HTTP the stream it arrives on would, but the SDK's client does not
tell), so a request goes to a client only when that client's calls are the only ones in flight
on the connection it came on. Calls of one client, or any number of calls of clients that can
answer nothing, share a connection; a client that can answer something and whose call comes
while another's calls are in flight gets a connection of its own (the server's
`client_connections`, up to `max_client_connections` in use at once), so its server's questions
are always placed, even the very first. Beyond that number, or where a server has no such
connections, calls share the server's own connection until the server has asked anything, and
take turns from then on (one client at a time); a question that comes while calls of several
clients share a connection waits until it can be placed (see `Lane.placeable`). A server that
never asks, called by one client at a time, is never slowed down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext

from toolkeeper.downstreams.base import Downstream, Era
from toolkeeper.protocol import CAPABILITY_FOR_REQUEST
from toolkeeper.relay.exchange import Exchange

# How long a call waits for its server to take new roots after it was told they changed.
ROOTS_SETTLE_SECONDS = 2.0


def declares(capabilities: types.ClientCapabilities | None, method: str) -> bool:
    """Whether a client's capabilities let it be asked `method`."""
    return bool(capabilities and getattr(capabilities, CAPABILITY_FOR_REQUEST[method], None) is not None)


@dataclass(eq=False)
class Caller:
    """One running downstream call, seen from the server's side."""

    # The client's request, when the SDK's handler drives the call (None: a plain call that
    # cannot be asked anything).
    ctx: ServerRequestContext[Any] | None
    # Who answers what the server asks during this call: a legacy client's connection, or the
    # call's `Exchange` when a modern client is asked by round trips (a modern client's calls
    # each stand alone). None: nobody can.
    answerer: object | None = None

    @property
    def exchange(self) -> Exchange | None:
        return self.answerer if isinstance(self.answerer, Exchange) else None

    @property
    def party(self) -> object:
        """Whose call this is, as far as the server's messages go: its answerer, or the call
        itself when nobody can answer."""
        return self.answerer if self.answerer is not None else self

    def can_answer(self, method: str) -> bool:
        if self.exchange is not None:
            return declares(self.exchange.capabilities, method)
        return self.ctx is not None and declares(self.ctx.session.client_capabilities, method)

    def goes_with(self, other: Caller) -> bool:
        """Whether a server's question during either call could only be for the one who can
        answer it: both are one client's, or neither client can answer anything."""
        if self.answerer is None:
            return other.answerer is None
        return other.answerer is self.answerer


@dataclass(eq=False)
class Lane:
    """One connection to the server and the calls running on it."""

    connection: Downstream
    running: list[Caller] = field(default_factory=list)
    # The server's requests on this connection waiting to be placed, oldest first, and what
    # wakes them when the calls in flight or the waiting requests change.
    _unplaced: list[object] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def latest(self) -> Caller | None:
        return self.running[-1] if self.running else None

    def mixed(self) -> bool:
        """Whether calls of several clients are in flight: then nobody can tell whose a message
        from the server (a log message) is."""
        return len({id(c.party) for c in self.running}) > 1

    def asked_ambiguously(self) -> bool:
        """Whether a question of the server cannot be placed now: calls of several clients that
        can answer are in flight, or calls of one such client and calls of clients that can
        answer nothing (among those only, every call gets the same refusal)."""
        return len({id(c.answerer) for c in self.running}) > 1

    def fits(self, caller: Caller) -> bool:
        return all(caller.goes_with(other) for other in self.running)

    def wake_unplaced(self) -> None:
        # Only a request waiting in `placeable` waits for this, and it stays in `_unplaced` while
        # it waits: with none there, every call's finish skips making a new event.
        if self._unplaced:
            self._changed.set()
            self._changed = anyio.Event()

    async def placeable(self, timeout: float) -> bool:
        """Wait, up to `timeout`, until the calls in flight are one client's (or can answer
        nothing), so that a request the server sent meanwhile is that client's. False if they
        are not: the wait ran out, or every call in flight may be waiting on one of the requests
        waiting here. Then none of those calls can end on its own, so the newest request is given
        up: its call can end, and the others can be placed."""
        request = object()
        self._unplaced.append(request)
        self.wake_unplaced()
        try:
            with anyio.move_on_after(timeout):
                while self.asked_ambiguously():
                    if request is self._unplaced[-1] and len(self._unplaced) >= len(self.running):
                        return False
                    changed = self._changed
                    await changed.wait()
            return not self.asked_ambiguously()
        finally:
            self._unplaced.remove(request)
            self.wake_unplaced()


class ServerCalls:
    """The calls in flight on one downstream server, over its own connection and the connections
    it opened for one client at a time (see the module's docstring)."""

    def __init__(
        self, downstream: Downstream, *, max_client_connections: int = 0, idle_seconds: float = 60.0
    ) -> None:
        self.downstream = downstream
        self.shared = Lane(downstream)
        # The server's own connection first, then those of one client each now in use.
        self.lanes: list[Lane] = [self.shared]
        self.max_client_connections = max_client_connections
        self.idle_seconds = idle_seconds
        self._opening = 0
        self.asks = False
        self._queue: list[tuple[Caller, anyio.Event]] = []
        # Whether the server asked for roots outside of a call (it is told when they change), and,
        # while it has not asked again since it was told, what its calls wait for.
        self.takes_roots = False
        self.roots_pending: anyio.Event | None = None

    @property
    def running(self) -> list[Caller]:
        return [caller for lane in self.lanes for caller in lane.running]

    def lane_of(self, connection: Downstream) -> Lane | None:
        """The lane of the connection a message came on (None: one that carries no call now)."""
        return next((lane for lane in self.lanes if lane.connection is connection), None)

    def _isolates(self) -> bool:
        """Whether a client gets a connection of its own when its call meets another's."""
        return (
            self.max_client_connections > 0
            and self.downstream.era is Era.LEGACY
            and self.downstream.client_connections is not None
        )

    def _lane_for(self, caller: Caller) -> Lane | None:
        """A lane the call may join now: one carrying this client's calls, else a free one (the
        server's own first). Until a server that has no connections for one client asks
        anything, its own connection takes every call."""
        if not self.asks and not self._isolates():
            return self.shared
        busy = (lane for lane in self.lanes if lane.running and lane.fits(caller))
        free = (lane for lane in self.lanes if not lane.running)
        return next(busy, None) or next(free, None)

    async def start(self, caller: Caller) -> Downstream:
        """Wait for this call's turn (FIFO, so a client that can be asked is not starved); the
        connection it is to run on."""
        if self.roots_pending is not None:
            with anyio.move_on_after(ROOTS_SETTLE_SECONDS):
                await self.roots_pending.wait()
        if not self._queue:
            lane = self._lane_for(caller)
            if (
                lane is None
                and self._isolates()
                and self._opening + len(self.lanes) - 1 < self.max_client_connections
            ):
                lane = await self._open_lane()
            if lane is None and not self.asks:
                # More clients at once than connections: they share the server's own, as long as
                # the server has never asked anything.
                lane = self.shared
            if lane is not None:
                lane.running.append(caller)
                return lane.connection
        return await self._wait_in_queue(caller)

    async def _open_lane(self) -> Lane | None:
        connections = self.downstream.client_connections
        assert connections is not None
        self._opening += 1
        try:
            connection = await connections.take()
        finally:
            self._opening -= 1
        if connection is None:
            return None
        lane = Lane(connection)
        self.lanes.append(lane)
        return lane

    async def _wait_in_queue(self, caller: Caller) -> Downstream:
        admitted = anyio.Event()
        entry = (caller, admitted)
        self._queue.append(entry)
        try:
            await admitted.wait()
        except BaseException:
            if entry in self._queue:
                self._queue.remove(entry)
            else:
                self.finish(caller)  # admitted just as its client gave up
            raise
        lane = next(lane for lane in self.lanes if caller in lane.running)
        return lane.connection

    def finish(self, caller: Caller) -> None:
        lane = next((lane for lane in self.lanes if caller in lane.running), None)
        if lane is not None:
            lane.running.remove(caller)
        while self._queue:
            waiting, admitted = self._queue[0]
            free = self._lane_for(waiting)
            if free is None:
                break
            self._queue.pop(0)
            free.running.append(waiting)
            admitted.set()
        if lane is None:
            return
        lane.wake_unplaced()
        if lane is not self.shared and not lane.running:
            self._give_back(lane)

    def _give_back(self, lane: Lane) -> None:
        self.lanes.remove(lane)
        connections = self.downstream.client_connections
        if connections is not None:
            connections.give_back(lane.connection, self.idle_seconds)

    def connections(self) -> list[Downstream]:
        return [lane.connection for lane in self.lanes]
