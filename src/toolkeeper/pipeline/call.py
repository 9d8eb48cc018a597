"""One `tools/call` on its way through the pipeline, and who made it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from toolkeeper.annotations.resolve import Resolution
    from toolkeeper.catalog import CatalogTool
    from toolkeeper.policy.model import DecisionRecord


# A call's remote account as the audit log keeps it: {"account": ..., "subject": ... or None}.
RemoteAccount = dict[str, str | None]


class Target(Protocol):
    """What an exposed name stands for in the view: a downstream's tool, or one of the gateway's
    own (a face's configuration tools). The stages read these members; none asks which kind of
    target it has."""

    @property
    def exposed_name(self) -> str: ...

    @property
    def tool(self) -> CatalogTool | None:
        """The downstream tool behind the name: its hints are resolved, the policy decides on it
        and the audit log names it. None for the gateway's own tools, which act only on the
        gateway's own state: no hints to resolve, nothing to gate."""
        ...

    @property
    def toolset(self) -> str | None:
        """The toolset the tool is listed under, whose pins and confirm modes hold for its calls:
        the equipped one, or one a client key's scope names; None without one, and for the
        gateway's own tools."""
        ...

    def needs_client(self, call: ToolCall) -> bool:
        """Whether something may have to reach the client during this call (a question from a
        handshake-era server), so that only a driver with a request context can run it."""
        ...

    def remote_account(self, call: ToolCall) -> RemoteAccount | None:
        """The account of the remote server this call is made with (`account`: the gateway's or
        the principal's; `subject`: the token's, where it names one), for the audit log. None
        where the server signs in nowhere, and for the gateway's own tools."""
        ...

    async def forward(self, call: ToolCall) -> dict[str, Any]:
        """Run the call: the downstream's result (raw JSON) or a tool error result."""
        ...


PrincipalKind = Literal["local", "anonymous", "key", "oauth"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is behind a request, as the gateway established it (never what a client says of
    itself): the local user (stdio, or HTTP on loopback without authentication), anybody (HTTP
    with authentication turned off on purpose), a client key, or an OAuth token's subject.

    `toolsets` and `servers` choose what it sees: the tools of those toolsets (each listed as
    its toolset lists it) and every tool of those servers; both empty, what normal mode lists.
    Only an admin gets the configuration tools, which change what everyone shares."""

    name: str  # a key's name, "oauth:<sub>", "local" or "anonymous"
    kind: PrincipalKind
    admin: bool = False
    toolsets: tuple[str, ...] = ()  # in the key's order: a tool in two is listed under the first
    servers: frozenset[str] = frozenset()
    client_id: str | None = None  # an OAuth token's client_id

    @property
    def scoped(self) -> bool:
        return bool(self.toolsets or self.servers)

    @property
    def identity(self) -> str:
        """Who this is, told apart from every other principal (a key may be named "local")."""
        return f"{self.kind}:{self.name}"

    def label(self) -> str:
        return f"{self.name} via {self.client_id}" if self.client_id else self.name


LOCAL_USER = Principal("local", "local", admin=True)
ANYONE = Principal("anonymous", "anonymous", admin=True)


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who made a call: the client's own name and version, the connection or session it came on
    (a stdio connection, an HTTP session id), and the principal the edge authenticated.

    `bound` says whether `session` names something no other program can take: this gateway
    process's stdio client, an HTTP session the gateway issued, or an authenticated principal.
    Only then does a "for this session" answer (or an approval a retry may lean on) outlive the
    call: a name another program could send (a client's declared name and version) binds nothing."""

    name: str | None
    version: str | None
    session: str
    principal: Principal = LOCAL_USER
    bound: bool = False

    @property
    def binding(self) -> str | None:
        """The session a "for this session" answer holds for; None when there is none to bind to."""
        return self.session if self.bound else None

    def label(self) -> str:
        who = (
            f"{self.name} {self.version}" if self.name and self.version else self.name or "an unnamed client"
        )
        return f"{who} ({self.session})"


UNKNOWN_CLIENT = ClientIdentity(None, None, "unknown")


@dataclass(slots=True, eq=False)
class ToolCall:
    """One `tools/call` on its way through the pipeline."""

    name: str  # the exposed name the client called
    params: dict[str, Any]  # the request's params as the client sent them (wire form)
    modern: bool  # whether the client speaks the 2026-07-28 era
    # The SDK's request context, when the SDK's handler drives the call: the relay needs it
    # for a call during which the server may talk back to this client (progress, questions).
    ctx: ServerRequestContext[Any, Any] | None = None
    # The client's declared capabilities in wire form, when the fast lane drives the call.
    capabilities: dict[str, Any] | None = None
    client: ClientIdentity = UNKNOWN_CLIENT
    target: Target | None = None
    resolution: Resolution | None = None
    decision: DecisionRecord | None = None  # set by the decide stage
    result: dict[str, Any] | None = None
    error: BaseException | None = None
    started: float = field(default_factory=time.monotonic)
    extra: dict[str, Any] = field(default_factory=dict)  # what stages leave for later stages

    @property
    def arguments(self) -> dict[str, Any]:
        arguments = self.params.get("arguments")
        return arguments if isinstance(arguments, dict) else {}
