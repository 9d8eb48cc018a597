"""Every use of the `mcp` SDK's private attributes, in one place.

Each function says what it does, why no public API does it in mcp 2.3, and which public API
would replace it. `tests/test_sdk_private.py` checks that the installed SDK still has every
attribute used here, so an SDK upgrade that moves one fails there, loudly, instead of in a
call path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from mcp import Client
from mcp.server.session import ServerSession

# (owner, attribute) pairs used below, for the test that guards them.
PRIVATE_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("mcp.client.session.ClientSession", "_stamp"),
    ("mcp.client.session.ClientSession", "_dispatcher"),
    ("mcp.server.session.ServerSession", "_connection"),
)


async def send_unvalidated(
    client: Client, method: str, params: dict[str, Any] | None, timeout: float
) -> dict[str, Any]:
    """A request whose result skips the SDK's models: a custom method (`tools/resolve`), or a
    list page the models would refuse for one bad field. The SDK's `send_request` always
    validates the result against a model; this stamps the request and hands it to the
    session's dispatcher exactly as `send_request` does, without the validation.

    Waits for: a public raw request on `ClientSession` (for example `send_raw_request`)."""
    session = client.session
    data: dict[str, Any] = {"method": method}
    if params is not None:
        data["params"] = params
    options: Any = {"timeout": timeout}
    session._stamp(data, options)
    result = await session._dispatcher.send_raw_request(data["method"], data.get("params"), options)
    return result if isinstance(result, dict) else {}


def connection_of(session: ServerSession) -> object:
    """What lives as long as the client: the SDK builds a `ServerSession` per request, so a
    client's log level and subscriptions are kept by its connection, which the session holds
    privately. Falls back to the session itself.

    Waits for: a public `ServerSession.connection` (or a stable per-client key)."""
    return getattr(session, "_connection", session)


def on_connection_end(session: ServerSession, callback: Callable[..., Awaitable[Any]], *args: Any) -> bool:
    """Have `callback(*args)` run when the client's connection closes (a handshake-era session
    ends: the client leaves, deletes its HTTP session, or it idles out). Through the connection's
    public `exit_stack`, reached as `connection_of` reaches the connection. False when there is
    none to reach.

    Waits for: a public `ServerSession.connection` (or `ServerRequestContext.connection`)."""
    stack = getattr(connection_of(session), "exit_stack", None)
    if not isinstance(stack, AsyncExitStack):
        return False
    stack.push_async_callback(callback, *args)
    return True
