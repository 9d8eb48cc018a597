"""Who made a call: the client's name and version, and the session that scopes its answers.

Both ways into the pipeline (the SDK's handler and the fast lanes) must name the same client
the same way: a question asked on one way may be answered by a retry that arrives on the other.
- over stdio there is one client per gateway process;
- over HTTP, a session's `Mcp-Session-Id`; a modern client without a session is known by the
  name and version it sends with every request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from toolkeeper.pipeline.call import ClientIdentity

CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
STDIO_SESSION = f"stdio:{os.getpid()}"


def client_from_meta(meta: Any, *, http: bool, session_id: str | None = None) -> ClientIdentity:
    """A modern request's client, from the `clientInfo` in its `_meta`."""
    info = meta.get(CLIENT_INFO_META) if isinstance(meta, Mapping) else None
    return _identity(info if isinstance(info, Mapping) else {}, http=http, session_id=session_id)


def client_of(ctx: Any, params: Mapping[str, Any]) -> ClientIdentity:
    """The client of a request the SDK's handler took (`ctx` is its request context)."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    http = headers is not None
    session_id = headers.get("mcp-session-id") if headers is not None else None
    client_params = ctx.session.client_params
    if client_params is not None:  # handshake era: what the client said in initialize
        info = client_params.client_info
        return _identity({"name": info.name, "version": info.version}, http=http, session_id=session_id)
    return client_from_meta(params.get("_meta"), http=http, session_id=session_id)


def _identity(info: Mapping[str, Any], *, http: bool, session_id: str | None) -> ClientIdentity:
    name = info.get("name") if isinstance(info.get("name"), str) else None
    version = info.get("version") if isinstance(info.get("version"), str) else None
    if not http:
        session = STDIO_SESSION
    elif session_id:
        session = f"http:{session_id}"
    else:
        session = f"http:{name or 'unnamed'}/{version or '?'}"
    return ClientIdentity(name, version, session)
