"""Who made a call: the client's name and version, and the session that scopes its answers.

Every way into the pipeline (the stdio fast lane, the HTTP fast lane, the SDK's handler) must
name the same client the same way: a question asked on one way may be answered by a retry that
arrives on another. So all of them ask `identify`:
- over stdio there is one client per gateway process, named by a nonce the process draws at
  start (never its pid, which a new process in a fresh pid namespace has again);
- over HTTP, a session's `Mcp-Session-Id`, which the SDK issues at random and accepts only from
  the credential that opened it, in this process; a modern client without a session is known by
  the name and version it sends with every request. Either is the principal's own: a "for this
  session" answer given to one principal never holds for another's calls.
A name and version are what the client says of itself, and any other program can say the same:
such a client has no session to bind a "for this session" answer to (`ClientIdentity.bound` is
False), unless the edge authenticated it (a client key, an OAuth token), whose principal is then
the binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from mcp.server.context import ServerRequestContext

from toolkeeper.edge.principal_user import principal_of
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, Principal
from toolkeeper.services.approvals import BOOT

Transport = Literal["http", "stdio"]

CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
STDIO_SESSION = f"stdio:{BOOT}"
# Principals the edge established with a credential: each is a binding of its own.
AUTHENTICATED = ("key", "oauth")


def identify(
    *,
    transport: Transport,
    client_info: object,
    session_id: str | None = None,
    principal: Principal = LOCAL_USER,
) -> ClientIdentity:
    """The client of a request, named the one way every way in names it, with the principal
    the edge authenticated (over stdio, the local user).

    `client_info` is the client's info as the client declared it: in the handshake era what it
    said in `initialize`, in the 2026-07-28 era the `clientInfo` in the request's `_meta`.
    Anything but an object there, and any name or version that is not a string, names nobody.
    `session_id` is the HTTP session's `Mcp-Session-Id`, if the request came in a session the
    SDK issued (handshake era)."""
    info = client_info if isinstance(client_info, Mapping) else {}
    name = info.get("name")
    version = info.get("version")
    name = name if isinstance(name, str) else None
    version = version if isinstance(version, str) else None
    # The local user's sessions keep the names they had before there were principals.
    owner = "" if principal.kind in ("local", "anonymous") else f"{principal.name}@"
    if transport == "stdio":
        session, bound = STDIO_SESSION, True
    elif session_id:
        session, bound = f"http:{owner}{session_id}", True
    else:
        session = f"http:{owner}{name or 'unnamed'}/{version or '?'}"
        bound = principal.kind in AUTHENTICATED
    return ClientIdentity(name, version, session, principal, bound)


def client_of(ctx: ServerRequestContext[Any], params: Mapping[str, Any]) -> ClientIdentity:
    """The client of a request the SDK's handler took (`ctx` is its request context): the SDK's
    path into `identify`."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    transport: Transport = "stdio" if headers is None else "http"
    scope = getattr(request, "scope", None)
    principal = principal_of(scope) if isinstance(scope, Mapping) else None
    if principal is None:
        if transport == "http":  # fail closed: every HTTP request passes the edge's authentication
            raise RuntimeError("an HTTP request reached the MCP face without passing authentication")
        principal = LOCAL_USER
    session_id: str | None = None
    client_params = ctx.session.client_params
    if client_params is not None:  # handshake era: what the client said in initialize
        declared = client_params.client_info
        client_info: object = {"name": declared.name, "version": declared.version}
        # The SDK issued this session and answers 404 to an id it did not issue (or to another
        # credential); a 2026-07-28 request's Mcp-Session-Id is checked by nobody, so it names none.
        session_id = headers.get("mcp-session-id") if headers is not None else None
    else:
        meta = params.get("_meta")
        client_info = meta.get(CLIENT_INFO_META) if isinstance(meta, Mapping) else None
    return identify(transport=transport, client_info=client_info, session_id=session_id, principal=principal)
