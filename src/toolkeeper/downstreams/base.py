"""What the gateway uses of a tool source, whatever kind it is.

A downstream is anything toolkeeper connects to for tools: today an MCP server over stdio,
streamable HTTP or SSE (`McpConnection`). The gateway, the relay, request forwarding and
inspection are typed against `Downstream` only, so a new kind (registered in kinds.py, often
built on `ToolSource`'s defaults) fits in without touching them. docs/architecture.md shows
where this sits in the flow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as types
from pydantic import TypeAdapter

if TYPE_CHECKING:
    import anyio

    from toolkeeper.config.model import SourceConfig

# A result taken as the server sent it. The SDK validates a result with a TypeAdapter as readily
# as with a model, but types `send_request` for models only.
RAW = TypeAdapter(dict[str, Any])

# What a downstream server may ask of the client side during a call.
ServerInput = types.CreateMessageRequest | types.ElicitRequest | types.ListRootsRequest


class ProgressCallback(Protocol):
    """Told of a call's progress as the downstream reports it."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


class Era(StrEnum):
    """Which MCP wire a server is spoken to on: the handshake era or 2026-07-28's."""

    LEGACY = "legacy"
    MODERN = "modern"


class State(StrEnum):
    STARTING = "starting"
    # Its first load is taking a while (a large OpenAPI spec): the gateway serves without it,
    # and its tools arrive with a tool-list change when ready. Progress in `load_progress`.
    LOADING = "loading"
    READY = "ready"
    RECONNECTING = "reconnecting"
    # The server asked for a sign-in its account does not have (or whose token could not be
    # renewed): no reconnecting until the account signs in, then at once.
    NEEDS_SIGN_IN = "needs sign-in"
    STOPPED = "stopped"


@dataclass(frozen=True)
class KnownHint:
    """A hint the gateway knows for itself about a source's tool, not one the source declared:
    an HTTP operation's method says whether it only reads. It reaches the catalog as a Python
    value set by the kind of source, never from anything a source sends, so no MCP server can
    claim one."""

    value: bool
    reason: str  # why it holds, in a sentence: "the HTTP method GET only reads"


# Tool name -> hint -> what the gateway knows.
KnownHints = Mapping[str, Mapping[str, KnownHint]]


class Unavailable(Exception):
    """The downstream cannot take calls right now; the message says why and what happens next."""


class NotOffered(Unavailable):
    """The source does not offer this at all: a kind of source that is not an MCP server has no
    resources, prompts or per-call hints of its own."""


class CallTimedOut(Exception):
    """The downstream did not answer within its configured timeout."""


class Downstream(Protocol):
    """One tool source, kept connected by its own `run` until that is cancelled.

    The lists are snapshots in wire form (raw JSON objects), replaced as a whole when they
    change, never edited in place: the catalog builds its immutable view from them.
    """

    name: str
    state: State
    # What the source declared it offers, in wire form ({} until connected).
    capabilities: dict[str, Any]
    protocol_version: str | None
    # What the source says about using it (its `instructions`), as last heard; None if nothing.
    instructions: str | None
    last_error: str | None
    connected_since: float | None
    connects: int
    first_attempt_done: anyio.Event
    # While it loads what it was made from: (done, total) of the work, as last reported (an
    # OpenAPI source counts operations); None when not loading or when it cannot tell.
    load_progress: tuple[int, int] | None
    # Hints the gateway knows for itself about some of the tools (see KnownHint); an MCP
    # server has none.
    known_hints: KnownHints

    @property
    def config(self) -> SourceConfig: ...

    @property
    def tools(self) -> list[dict[str, Any]]: ...

    @property
    def resources(self) -> list[dict[str, Any]]: ...

    @property
    def resource_templates(self) -> list[dict[str, Any]]: ...

    @property
    def prompts(self) -> list[dict[str, Any]]: ...

    @property
    def era(self) -> Era | None:
        """The MCP era the source is spoken to in; None before an MCP server's first connection,
        and for a source that is not an MCP server."""
        ...

    @property
    def may_ask_client(self) -> bool:
        """Whether, during a call, it may ask the calling client something (sampling,
        elicitation, roots) over that client's own session."""
        ...

    @property
    def client_connections(self) -> ConnectionsForClients | None:
        """More connections to the same server, each carrying one client's calls at a time: a
        handshake-era server's question during a call does not say whose call it is for. None
        where there are none (a source that asks nothing, a per-principal server)."""
        ...

    @property
    def available(self) -> bool: ...

    def describe_unavailable(self) -> str:
        """Why calls cannot be taken now, and what happens next, for an error message."""
        ...

    async def run(self, connect_slots: anyio.CapacityLimiter) -> None:
        """Connect, stay connected and reconnect until cancelled; cancelling closes it."""
        ...

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        meta: dict[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
        extra: dict[str, Any] | None = None,
        log_level: str | None = None,
    ) -> dict[str, Any]:
        """One `tools/call`; the result as the source sent it (raw JSON)."""
        ...

    async def request(self, request: Any, *, on_progress: ProgressCallback | None = None) -> dict[str, Any]:
        """Any other request (resources, prompts, completion, logging); the raw result."""
        ...

    async def subscribe(self, uri: str) -> None: ...

    async def unsubscribe(self, uri: str) -> None: ...

    async def set_log_level(self, level: str) -> None: ...

    async def roots_changed(self) -> None:
        """Tell the server that the client side's roots changed (handshake era; else nothing)."""
        ...

    async def resolve_hints(self, name: str, arguments: dict[str, Any], method: str) -> dict[str, Any]:
        """The source's own argument-specific hints (`tools/resolve` or `tools/annotations`)."""
        ...

    def reload(self) -> None:
        """Read again, now, what the source was made from (a person asked: `toolkeeper reload`
        or SIGHUP). A source with nothing of the sort (an MCP server tells its own changes)
        does nothing."""
        ...

    def reconnect(self) -> None:
        """Drop the current connection and connect again now, the backoff started over (a person
        asked for it). A source with no connection of its own reads again what it was made from,
        as `reload` does."""
        ...

    def stop_calls(self, reason: str) -> int:
        """The gateway is stopping (`reason`): refuse calls from now on and cancel those in
        flight, each caller told why. How many were in flight."""
        ...

    @property
    def calls_in_flight(self) -> int:
        """Calls not yet returned to their callers."""
        ...


class ConnectionsForClients(Protocol):
    """A server's connections for one client at a time (downstreams/client_connections.py)."""

    async def take(self) -> Downstream | None:
        """A free connection, or a new one once ready; None if none could be made ready."""
        ...

    def give_back(self, connection: Downstream, idle_seconds: float) -> None:
        """It carries no call now: free for the next client, closed after `idle_seconds`."""
        ...


class DownstreamListener(Protocol):
    """What the gateway hears from its downstreams."""

    def downstream_changed(self, downstream: Downstream, lists: set[str] | None = None) -> None:
        """Its state changed, or the lists named (keys of LISTS) changed."""

    async def downstream_request(
        self, downstream: Downstream, request: ServerInput
    ) -> types.InputResponse | types.ErrorData:
        """It asks the client side for something (sampling, elicitation, roots)."""
        ...

    async def downstream_log(
        self, downstream: Downstream, params: types.LoggingMessageNotificationParams
    ) -> None:
        """It sent a log message."""

    async def resource_updated(self, downstream: Downstream, uri: str) -> None:
        """A resource someone subscribed to changed."""
